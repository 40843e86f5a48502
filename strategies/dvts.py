"""Diverse Verifier Tree Search, DVTS (HF search-and-learn, Beeching, Tunstall and Rush 2024).

The N samples of a depth are split into N/M independent subtrees, each a greedy search of width
one: its path proposes M next steps, all are scored as they are written, and the best-valued
proposal (ties to the earlier sample) becomes the path; the subtree ends when that proposal ends
its solution, or at ``max_depth``. Subtrees never compare with each other, so they do not all
collapse onto one high-scoring prefix, and they run concurrently (none waits for a slower one).
As search-and-learn does, a subtree's leaves are all M proposals of its last depth (the chosen
one among them); the answer is the weighted vote over the leaves of every subtree.
"""

from __future__ import annotations

from paragen import BaseStrategy, RunContext
from paragen.types import Problem, StrategyResult
from strategies._search_common import Path, TreeFields, weighted_finish
from strategies._search_steps import StepSearch, check_continuation
from strategies.beam_search import rank


class DVTSConfig(TreeFields):
    """N (``n``, what ``-n`` sets) samples per depth over N/M subtrees of M expansions each."""


class DVTS(BaseStrategy[DVTSConfig]):
    """N/M independent greedy subtrees (M expansions each), a weighted vote over their leaves."""

    name = "dvts"
    Config = DVTSConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        cfg = self.config
        check_continuation(ctx)
        search = StepSearch(ctx, cfg, problem.question)
        trees = cfg.n // cfg.m
        leaves: list[list[Path]] = [[] for _ in range(trees)]
        depths = [0] * trees
        async with ctx.concurrently() as children:
            for tree in range(trees):
                children.start(self._grow_tree, ctx, search, tree, leaves, depths)
        metrics = {"depth": float(max(depths)), "subtrees": float(trees)}
        return weighted_finish(ctx, [p for found in leaves for p in found], cfg, metrics=metrics)

    async def _grow_tree(
        self, ctx: RunContext, search: StepSearch, tree: int, leaves: list[list[Path]], depths: list[int]
    ) -> None:
        """One subtree to its end; its last depth's proposals go to ``leaves[tree]``."""
        cfg, path = self.config, Path()
        for depth in range(cfg.max_depth):
            (proposals,) = await search.expand([path], cfg.m, depth=depth, label=f"tree{tree}/depth{depth}")
            if not proposals:  # every sample failed: the subtree ends with what it had
                break
            leaves[tree], depths[tree] = proposals, depth + 1
            best, *others = rank(proposals, cfg)
            for other in others:
                search.traces[other.last_id].meta["search"] = f"dropped at depth {depth}"
            ctx.emit(
                "dvts: selected",
                tree=tree,
                depth=depth,
                kept=best.last_id,
                dropped=[p.last_id for p in others],
                finished=best.finished,
            )
            if best.finished:
                break
            path = best
