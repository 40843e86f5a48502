"""Best-of-n: n samples, keep the one a scorer rates highest.

The default scorer is the mean token log-probability (needs a backend that returns
logprobs); any ``module:function`` taking a Trace and returning a float can replace it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from pydantic import Field, field_validator

from paragen import BaseStrategy, RunContext, StrategyConfig
from paragen.answers import extract_answer
from paragen.errors import ConfigError
from paragen.prompts import solve_messages
from paragen.types import Problem, StrategyResult, Trace

Scorer = Callable[[Trace], float]


def mean_logprob(trace: Trace) -> float:
    """Average log-probability of the sampled tokens (higher = the model was surer)."""
    if not trace.logprobs:
        return float("-inf")
    return sum(trace.logprobs) / len(trace.logprobs)


def shortest(trace: Trace) -> float:
    """Prefer shorter traces (FFS's observation that correct traces tend to be shorter)."""
    return -float(trace.completion_tokens)


BUILTIN_SCORERS: dict[str, Scorer] = {"mean_logprob": mean_logprob, "shortest": shortest}


def load_scorer(spec: str) -> Scorer:
    """A built-in scorer by name, or a user callable given as ``package.module:function``."""
    if spec in BUILTIN_SCORERS:
        return BUILTIN_SCORERS[spec]
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise ConfigError(
            f"unknown scorer {spec!r}", hint=f"use {sorted(BUILTIN_SCORERS)} or 'module:function'"
        )
    try:
        scorer = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load scorer {spec!r}: {exc}") from exc
    if not callable(scorer):
        raise ConfigError(f"scorer {spec!r} is not callable")
    return scorer  # type: ignore[no-any-return]


class BestOfNConfig(StrategyConfig):
    n: int = Field(default=4, ge=1, le=1024)
    scorer: str = Field(default="mean_logprob", description="built-in name or module:function")

    @field_validator("scorer")
    @classmethod
    def _loadable(cls, value: str) -> str:
        load_scorer(value)
        return value


class BestOfN(BaseStrategy[BestOfNConfig]):
    """n samples at once; the highest-scoring one with an answer wins."""

    name = "best_of_n"
    Config = BestOfNConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        scorer = load_scorer(self.config.scorer)
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
