"""Adaptive-Consistency (Aggarwal et al., EMNLP 2023): sample in small batches until the vote is settled.

After every finished sample the stopping rule looks at the two leading answers'
counts (v1, v2): stop when the leader cannot be overtaken by the samples left, or
when the Beta criterion P(p1 > p2 | v1, v2) passes the threshold (0.95 by default).
Samples still in flight when it stops are cancelled, and their tokens counted.
"""

from __future__ import annotations

from math import comb

from pydantic import Field

from paragen import BaseStrategy, RunContext, StrategyConfig
from paragen.answers import vote_counts
from paragen.prompts import solve_messages
from paragen.types import GenerateRequest, Problem, StrategyResult, Trace
from strategies._toolkit import annotate, vote_finish


def beta_leader_probability(v1: int, v2: int) -> float:
    """P(p1 > p2) under a uniform prior when the top two answers have v1 and v2 votes.

    With p1 ~ Beta(v1 + 1, v2 + 1) this is 1 - I_0.5(v1 + 1, v2 + 1), which for integer
    counts equals P(Binomial(v1 + v2 + 1, 1/2) <= v1).
    """
    trials = v1 + v2 + 1
    return sum(comb(trials, j) for j in range(v1 + 1)) / float(1 << trials)


def should_stop(answers: list[str | None], max_samples: int, threshold: float) -> bool:
    """The stopping rule over the answers seen so far (NO_ANSWER ignored)."""
    counts = list(vote_counts(answers).values())
    if not counts:
        return False
    v1 = counts[0]
    v2 = counts[1] if len(counts) > 1 else 0
    left = max_samples - len(answers)
    return v1 - v2 > left or beta_leader_probability(v1, v2) >= threshold


class AdaptiveConfig(StrategyConfig):
    n: int = Field(default=16, ge=1, le=1024, description="most samples it may draw")
    batch: int = Field(default=2, ge=1, description="samples in flight at once")
    threshold: float = Field(default=0.95, gt=0.5, lt=1.0, description="Beta stopping threshold")

    def parallel_samples(self) -> int:
        """Samples in flight at once: one batch."""
        return min(self.n, self.batch)


class AdaptiveConsistency(BaseStrategy[AdaptiveConfig]):
    """Sample ``batch`` at a time; stop (cancelling the rest) once the leader is settled."""

    name = "adaptive_consistency"
    Config = AdaptiveConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        cfg = self.config
        request = ctx.request(messages=solve_messages(problem.question))
        seen: list[Trace] = []
        while len(seen) < cfg.n:
            size = min(cfg.batch, cfg.n - len(seen))
            seed = None if request.params.seed is None else request.params.seed + len(seen)
            if await self._batch(ctx, request.with_params(seed=seed), size, seen):
                ctx.emit("adaptive_consistency stopped", samples=len(seen))
                break
        return vote_finish(ctx, seen)

    async def _batch(self, ctx: RunContext, request: GenerateRequest, size: int, seen: list[Trace]) -> bool:
        async with ctx.fanout(request, n=size, label="sample") as fan:
            async for trace in fan:
                seen.append(annotate(trace))
                if should_stop([t.answer for t in seen], self.config.n, self.config.threshold):
                    await fan.cancel("settled")
                    return True
        return False
