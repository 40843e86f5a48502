"""Beam search with a process verifier (Snell et al. 2024, "Scaling LLM test-time compute optimally";
HF search-and-learn).

N beams in all, M expansions each: the first depth samples N first steps; every later depth the
N/M beams kept propose N next steps, M each, the kept beams copied in turn when fewer are left
(search-and-learn's refill; ``refill=False``: M each, fewer in all). Every proposal is scored
(the PRM sees all steps so far; their scores aggregated by ``aggregate``) as soon as it is
written. Proposals that end their solution join the finished pool whatever their rank (as
search-and-learn keeps its completed beams); of the others (each text once, as its recipes'
``filter_duplicates``) the N/M best-valued are kept, ties to the later beam in search-and-learn's
beam order. The search stops at ``max_depth``, when nothing
is left to grow, or as soon as N solutions have finished: the samples still running then are
cancelled ("early-finish"). The answer is the weighted vote (``weighting``) over the first N
finished solutions in beam order (``sort_completed=True``: the N best-valued), or over the beams
left if none finished.
"""

from __future__ import annotations

from pydantic import Field

from paragen import BaseStrategy, RunContext
from paragen.types import Problem, StrategyResult
from strategies._search_common import Path, TreeFields, weighted_finish
from strategies._search_steps import StepSearch, check_continuation


class BeamSearchConfig(TreeFields):
    """N (``n``, what ``-n`` sets) beams in all, M (``m``) expansions each: N/M beams kept per depth."""

    refill: bool = Field(
        default=True,
        description="every depth proposes N steps, the kept beams copied in turn up to N (search-and-learn); "
        "False: M per kept beam, fewer in all when fewer than N/M are kept",
    )
    filter_duplicates: bool = Field(
        default=True,
        description="of open proposals with the same text only the first in beam order is ranked "
        "(search-and-learn's recipes set filter_duplicates: true; its config's default is False)",
    )
    sort_completed: bool = Field(
        default=False,
        description="of more than N finished solutions keep the N best-valued; False: the first N in "
        "beam order (search-and-learn's default)",
    )


def proposal_counts(kept: int, n: int, m: int, *, refill: bool) -> list[int]:
    """How many next steps each of ``kept`` beams proposes (kept beams in the order they were written).

    search-and-learn duplicates its active beams in turn until there are N (``(beams * r)[:N]``), so
    the breadth stays N however few beams are left: the first ``N mod kept`` get one more.
    """
    if not refill:
        return [m] * kept
    return [n // kept + (1 if i < n % kept else 0) for i in range(kept)]


def rank(paths: list[Path], cfg: TreeFields) -> list[Path]:
    """Best value first; among equals the earlier sample (the lower trace id) first (``np.argmax``'s
    first maximum, as DVTS picks)."""
    return sorted(paths, key=lambda p: (-p.value(cfg.aggregate), p.last_id))


def survivors(paths: list[Path], cfg: TreeFields, width: int) -> list[Path]:
    """The ``width`` best of ``paths`` (given in search-and-learn's beam order), in that order.

    search-and-learn keeps the last ``width`` of ``np.argsort(scores)``. numpy promises no order
    among equal scores; a stable sort's is taken (numpy 1's insertion sort on arrays of up to 16,
    and numpy 2's on a run of equal scores): of equal beams at the cut the later ones survive.
    """
    ascending = sorted(range(len(paths)), key=lambda i: paths[i].value(cfg.aggregate))  # stable
    kept = set(ascending[len(paths) - width :] if width else [])
    return [p for i, p in enumerate(paths) if i in kept]


def unique_texts(paths: list[Path], delimiter: str) -> list[Path]:
    """The first path of each text, in order (search-and-learn's ``filter_duplicates``)."""
    first: dict[str, Path] = {}
    for path in paths:
        first.setdefault(path.text(delimiter), path)
    return list(first.values())


def beam_order(grown: list[list[Path]], refill: bool) -> list[Path]:
    """The proposals of a depth in search-and-learn's order: its beam list is the kept beams
    repeated in turn (``(beams * r)[:N]``), so the j-th proposal of kept beam b is at
    ``j * kept + b``; without refill, beam by beam."""
    if not refill:
        return [p for found in grown for p in found]
    placed = [(j * len(grown) + b, p) for b, found in enumerate(grown) for j, p in enumerate(found)]
    return [p for _, p in sorted(placed, key=lambda item: item[0])]


class BeamSearch(BaseStrategy[BeamSearchConfig]):
    """Keep the N/M best partial solutions, each proposing M next steps, until N have finished."""

    name = "beam_search"
    Config = BeamSearchConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        cfg = self.config
        check_continuation(ctx)
        search = StepSearch(ctx, cfg, problem.question)
        active, finished, depth = [Path()], list[Path](), 0
        for depth in range(cfg.max_depth):
            with ctx.phase("step", depth=depth):
                counts = (
                    [cfg.n] if depth == 0 else proposal_counts(len(active), cfg.n, cfg.m, refill=cfg.refill)
                )
                grown = await search.expand(active, counts, depth=depth, stop_after=cfg.n - len(finished))
                proposals = beam_order(grown, cfg.refill)
                finished += [p for p in proposals if p.finished]
                active = self._select(ctx, search, [p for p in proposals if not p.finished], depth)
            if len(finished) >= cfg.n or not active:
                break
        leaves = (rank(finished, cfg) if cfg.sort_completed else finished)[: cfg.n] or active
        metrics = {"depth": float(depth + 1), "finished": float(len(finished))}
        return weighted_finish(ctx, leaves, cfg, metrics=metrics)

    def _select(self, ctx: RunContext, search: StepSearch, open_paths: list[Path], depth: int) -> list[Path]:
        """The N/M best unfinished proposals; the others are marked dropped (they ended already)."""
        ranked = (
            unique_texts(open_paths, self.config.delimiter) if self.config.filter_duplicates else open_paths
        )
        kept = survivors(ranked, self.config, self.config.n // self.config.m)
        dropped = [p for p in open_paths if all(p is not k for k in kept)]
        for path in dropped:
            search.traces[path.last_id].meta["search"] = f"dropped at depth {depth}"
        ctx.emit(
            "beam_search: selected",
            depth=depth,
            kept={p.last_id: p.value(self.config.aggregate) for p in kept},
            dropped={p.last_id: p.value(self.config.aggregate) for p in dropped},
        )
        return kept
