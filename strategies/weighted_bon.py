"""Weighted best-of-N (Snell et al. 2024; HF search-and-learn) and plain best-of-N with a verifier.

``n`` independent solutions; each is scored the moment it finishes, while the others still run
(a PRM gets its steps, split at ``delimiter``; the LLM-as-verifier rates the whole solution).
A solution's value is its step scores aggregated (``aggregate``); the answer whose solutions'
values sum highest wins (``weighting="sum"``), or the single best-valued solution's (``"max"``);
solutions count in the order they finished, as the eval bank's offline re-scoring orders them
(ties go to the earlier; ``ties="sample"``: to the earlier in sample order, as search-and-learn).
Every sample trace keeps its step scores (``trace.scores``), so an eval bank can re-weigh
offline with another aggregate.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from paragen import BaseStrategy, RunContext
from paragen.types import Problem, StrategyResult, TokenCount, Trace
from strategies._search_common import Path, VerifierFields, split_steps, weighted_finish
from strategies._toolkit import annotate, overrides, solve_request


class WeightedBoNConfig(VerifierFields):
    n: int = Field(default=16, ge=1, le=4096, description="independent solutions")
    max_tokens: TokenCount | None = Field(default=None, description="per solution; None = run default")
    ties: Literal["finish", "sample"] = Field(
        default="finish",
        description="equal weights go to the solution that finished first, as the eval bank orders "
        "samples; sample: the first in sample order (search-and-learn)",
    )


class WeightedBoN(BaseStrategy[WeightedBoNConfig]):
    """n samples at once, each scored as it finishes; the answer with the largest summed value wins."""

    name = "weighted_bon"
    Config = WeightedBoNConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        cfg = self.config
        params: dict[str, Any] = overrides(cfg.temperature, cfg.top_p, cfg.max_tokens)
        request = solve_request(ctx, problem.question, n=cfg.n, **params)
        # Slots in the order samples finish: the vote breaks ties as the eval bank's offline one does.
        scored: list[Path | None] = []
        async with ctx.concurrently() as children, ctx.fanout(request) as fan:
            async for trace in fan:
                if annotate(trace).is_ok:
                    scored.append(None)
                    children.start(self._score, ctx, trace, scored, len(scored) - 1)
        paths = [p for p in scored if p is not None]
        if cfg.ties == "sample":  # trace ids are given in sample order
            paths.sort(key=lambda p: p.last_id)
        return weighted_finish(ctx, paths, cfg, metrics={"scored": float(len(paths))})

    async def _score(self, ctx: RunContext, trace: Trace, scored: list[Path | None], slot: int) -> None:
        steps = split_steps(trace.text, self.config.delimiter)
        # A PRM rates each step; the LLM-as-verifier (whole=True) the complete solution at once.
        verdict = await ctx.score(
            steps, verifier=self.config.verifier, whole=True, parents=[trace.id], label="score"
        )
        trace.scores = list(verdict.steps)
        scored[slot] = Path(
            (trace.text,), (trace.id,), tuple(verdict.steps), finished=True, answer=trace.answer
        )
