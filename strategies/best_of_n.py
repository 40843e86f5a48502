"""Best-of-n: n samples, keep the one a scorer rates highest.

The default scorer is the mean token log-probability (needs a backend that returns
logprobs); any trace ranker (:mod:`paragen.scoring.rankers`: ``shortest``, or a
``module:function`` taking a Trace and returning a float) can replace it.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from paragen import BaseStrategy, RunContext, StrategyConfig
from paragen.answers import extract_answer
from paragen.errors import ConfigError
from paragen.prompts import solve_messages
from paragen.scoring import load_trace_ranker
from paragen.types import Problem, StrategyResult, Trace

RANKER_KIND = "best_of_n scorer"  # what the user set: the ``scorer`` option


class BestOfNConfig(StrategyConfig):
    n: int = Field(default=4, ge=1, le=1024)
    scorer: str = Field(default="mean_logprob", description="built-in name or module:function")

    @field_validator("scorer")
    @classmethod
    def _loadable(cls, value: str) -> str:
        load_trace_ranker(value, RANKER_KIND)
        return value


class BestOfN(BaseStrategy[BestOfNConfig]):
    """n samples at once; the highest-scoring one with an answer wins."""

    name = "best_of_n"
    Config = BestOfNConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        scorer = load_trace_ranker(self.config.scorer, RANKER_KIND)
        wants_logprobs = self.config.scorer == "mean_logprob"
        if wants_logprobs and not ctx.capabilities.logprobs:
            raise ConfigError("best_of_n with scorer 'mean_logprob' needs a backend that returns logprobs")
        request = ctx.request(messages=solve_messages(problem.question), logprobs=wants_logprobs)
        candidates: list[tuple[float, int, Trace]] = []
        async with ctx.fanout(request, n=self.config.n) as fan:
            async for trace in fan:
                trace.answer = extract_answer(trace.text) if trace.is_ok else None
                if trace.answer is not None:
                    candidates.append((scorer(trace), -trace.id, trace))
        if not candidates:
            return ctx.finish(None)
        score, _, best = max(candidates, key=lambda c: (c[0], c[1]))
        metrics = {"best_score": score}
        return ctx.finish(best.answer, text=best.text, reasoning=best.reasoning, metrics=metrics)
