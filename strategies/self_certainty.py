"""Self-certainty selection (Kang, Zhao, Song; arXiv 2502.18581; code backprop07/Self-Certainty).

A response's self-certainty is the mean over its tokens of KL(U || p) = -log V - (1/V) *
sum_j log p_j, p the next-token distribution the token was sampled from (large = the model was
sure). ``best_of_n`` keeps the highest-scoring answered response; ``borda`` ranks every response
by score, gives rank r of N (N - r + 1) ** power votes, and the answer with the most votes wins
(power 0.5: the reference's default).

Neither an OpenAI-compatible server nor paragen's engine returns the whole distribution: a token
carries its own log-probability and the top k alternatives' (k <= 20). The KL is approximated
as ``strategies._certainty.token_self_certainty`` says (the top k and the sampled token known,
the mass they leave spread evenly over the other V - m tokens; a lower bound of the exact KL),
with V = ``vocab_size``. Each run reports k and V in its metrics (``self_certainty_top_k``,
``self_certainty_vocab``) and every sample the approximation in ``meta["self_certainty_approx"]``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from paragen import BaseStrategy, RunContext, StrategyConfig
from paragen.answers import ExtractMode
from paragen.errors import ConfigError
from paragen.types import Problem, StrategyResult, TokenCount, Trace
from strategies._certainty import best_scored, borda_vote, self_certainty
from strategies._toolkit import annotate, overrides, solve_request, vote_finish

SelectionMode = Literal["best_of_n", "borda"]


class SelfCertaintyConfig(StrategyConfig):
    n: int = Field(default=8, ge=1, le=1024, description="responses to choose from")
    mode: SelectionMode = "borda"
    power: float = Field(default=0.5, ge=0, description="Borda votes (N - r + 1) ** power (reference: 0.5)")
    top_k: int = Field(default=20, ge=0, le=20, description="alternatives per token the KL is estimated from")
    vocab_size: int = Field(
        default=49152, ge=2, description="V of the KL (default: SmolLM2's; the ranking barely depends on it)"
    )
    temperature: float | None = Field(default=None, ge=0)
    max_tokens: TokenCount | None = None
    extract: ExtractMode = "auto"


class SelfCertainty(BaseStrategy[SelfCertaintyConfig]):
    """n responses scored by self-certainty; the best one, or a Borda vote over their answers."""

    name = "self_certainty"
    Config = SelfCertaintyConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        cfg, caps = self.config, ctx.capabilities
        if not caps.logprobs:
            raise ConfigError(
                "self_certainty needs log-probabilities", hint="use the engine or an OpenAI server"
            )
        top_k = min(cfg.top_k, caps.top_logprobs)
        params = overrides(cfg.temperature, None, cfg.max_tokens)
        request = solve_request(ctx, problem.question, logprobs=True, top_logprobs=top_k, **params)
        done: list[Trace] = []
        async with ctx.fanout(request, n=cfg.n) as fan:
            async for trace in fan:
                if annotate(trace, cfg.extract).is_ok:
                    done.append(trace)
        scores = [self._score(t, top_k) for t in done]
        metrics = {"self_certainty_top_k": float(top_k), "self_certainty_vocab": float(cfg.vocab_size)}
        return self._select(ctx, done, scores, metrics)

    def _score(self, trace: Trace, top_k: int) -> float:
        value = self_certainty(trace.logprobs, trace.top_logprobs, self.config.vocab_size)
        trace.meta["self_certainty"] = value
        trace.meta["self_certainty_approx"] = (
            f"top-k={top_k}, rest uniform over V-k, V={self.config.vocab_size}"
        )
        return float("-inf") if value is None else value  # no log-probabilities: ranked last

    def _select(
        self, ctx: RunContext, done: list[Trace], scores: list[float], metrics: dict[str, float]
    ) -> StrategyResult:
        answers = [t.answer for t in done]
        if self.config.mode == "borda":
            _, votes = borda_vote(answers, scores, self.config.power)
            return vote_finish(ctx, done, weights=votes, metrics=metrics)
        best = best_scored(answers, scores)
        if best is None:
            return ctx.finish(None, metrics=metrics)
        chosen = done[best]
        metrics["best_score"] = scores[best]
        return ctx.finish(chosen.answer, text=chosen.text, reasoning=chosen.reasoning, metrics=metrics)


__all__ = ["SelectionMode", "SelfCertainty", "SelfCertaintyConfig"]
