"""Weighted best-of-N re-scored offline from a run's verifier scores (``Trace.scores``).

A run of ``weighted_bon`` at n = N records every sample's step scores, so the accuracy of
weighted best-of-k for every k <= N is an expectation over the k-subsets of its samples, as
maj@k is: exact where there are at most ``EXACT_SUBSETS`` subsets, else the mean over that many
subsets drawn with a fixed seed (the row's label says which). Subsets keep the order samples
finished in, so ties break as the live vote's did, and the aggregation is the strategies' own
(:mod:`paragen.scoring.aggregate`): weighted@N with the run's aggregate is its live answer. The
rows always sum the scores per answer (weighted best-of-N, ``weighting="sum"``, the default): a
run made with ``weighting="max"`` is re-scored as weighted best-of-k too, not as its own vote.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import get_args

from evals.analysis.bank import BankProblem, Verdicts, is_correct
from evals.analysis.metrics import k_subsets
from paragen.scoring.aggregate import Aggregate, aggregate, weighted_answer

EXACT_SUBSETS = 2000
SUBSET_SEED = 0


# Strategies whose samples are whole, independent solutions, each scored: beam search, DVTS and
# particle filtering score their samples too, but each of those is one step of a path.
WHOLE_SOLUTIONS = frozenset({"weighted_bon"})


def has_scores(bank: Sequence[BankProblem], strategy: str | None) -> bool:
    """Whether the bank holds scored whole solutions (only then are weighted rows meaningful)."""
    if strategy not in WHOLE_SOLUTIONS:
        return False
    return any(b.traces for b in bank) and all(t.scores for b in bank for t in b.traces)


def weighted_ks(n: int) -> list[int]:
    return sorted({*(2**i for i in range(n.bit_length()) if 2**i <= n), n})


def expected_weighted(item: BankProblem, k: int, how: Aggregate, verdicts: Verdicts) -> float:
    """The chance that weighted best-of-k over a k-subset of ``item``'s samples is correct."""
    weights = [aggregate(t.scores or (), how) for t in item.traces]
    n = len(weights)
    if n == 0:
        return 0.0
    hits = total = 0
    for subset in k_subsets(n, min(k, n), most=EXACT_SUBSETS, seed=SUBSET_SEED):
        answer = weighted_answer([item.answers[i] for i in subset], [weights[i] for i in subset])
        hits += is_correct(item, answer, verdicts)
        total += 1
    return hits / total


def weighted_methods(n: int) -> Iterator[tuple[str, int, Aggregate]]:
    """(row name, k, aggregate) of every weighted row for a bank of n samples."""
    for how in get_args(Aggregate):
        for k in weighted_ks(n):
            sampled = "" if math.comb(n, k) <= EXACT_SUBSETS else f", {EXACT_SUBSETS} subsets"
            yield f"weighted@{k}({how}{sampled})", k, how
