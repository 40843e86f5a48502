"""Weighted best-of-k re-scored offline from recorded verifier scores, against hand-computed cases."""

from __future__ import annotations

import pytest

from evals.analysis import bank_weighted
from evals.analysis.bank import BankProblem
from evals.analysis.bank_rows import offline_rows
from paragen.types import Trace

# Three samples answering 4, 5, 4 (gold 4); the verifier's step scores of each.
STEP_SCORES = [[0.9, 0.2], [0.9], [0.3, 0.8]]
VERDICTS = {("4", "4"): True, ("5", "4"): False}


def bank(scores: list[list[float]] | None = STEP_SCORES) -> BankProblem:
    traces = [Trace(id=i, text="", scores=None if scores is None else scores[i]) for i in range(3)]
    return BankProblem("p", "4", traces, ["4", "5", "4"])


@pytest.mark.parametrize(
    ("how", "k", "expected"),
    [
        # min: weights 0.2, 0.9, 0.3 -> every subset holding the 5 votes 5 (0.9 > 0.2 + 0.3)
        ("min", 1, 2 / 3),
        ("min", 2, 1 / 3),  # {0,1} 5, {0,2} 4, {1,2} 5
        ("min", 3, 0.0),
        # last: 0.2, 0.9, 0.8 -> all three: 4 has 1.0 > 0.9
        ("last", 2, 1 / 3),  # {0,1} 5 (0.9 > 0.2), {0,2} 4, {1,2} 5 (0.9 > 0.8)
        ("last", 3, 1.0),
        # prod: 0.18, 0.9, 0.24 -> 0.42 < 0.9
        ("prod", 3, 0.0),
    ],
)
def test_weighted_at_k_is_the_exact_expectation_over_subsets(how: str, k: int, expected: float) -> None:
    assert bank_weighted.expected_weighted(bank(), k, how, VERDICTS) == pytest.approx(expected)  # type: ignore[arg-type]


def test_rows_appear_only_when_every_sample_was_scored() -> None:
    rows = offline_rows([bank()], VERDICTS, source="weighted_bon n=3", n=3, strategy="weighted_bon")
    methods = {r["method"]: r["accuracy"] for r in rows}
    assert methods["weighted@3(last)"] == pytest.approx(1.0)
    assert methods["weighted@3(min)"] == pytest.approx(0.0)
    assert methods["weighted@2(prod)"] == pytest.approx(1 / 3)
    unscored = offline_rows([bank(None)], VERDICTS, source="weighted_bon n=3", n=3, strategy="weighted_bon")
    steps = offline_rows([bank()], VERDICTS, source="beam_search n=3", n=3, strategy="beam_search")
    for rows in (unscored, steps):  # unscored samples; scored steps of paths, not whole solutions
        assert not any(r["method"].startswith("weighted") for r in rows)


def test_large_banks_are_estimated_from_seeded_subsets() -> None:
    # C(20, 10) subsets is far above the exact limit: the row says it was sampled, and is stable.
    traces = [Trace(id=i, text="", scores=[i / 20]) for i in range(20)]
    item = BankProblem("p", "4", traces, ["4" if i % 2 else "5" for i in range(20)])
    names = [name for name, k, how in bank_weighted.weighted_methods(20) if k == 16 and how == "last"]
    assert names == [f"weighted@16(last, {bank_weighted.EXACT_SUBSETS} subsets)"]
    first = bank_weighted.expected_weighted(item, 10, "last", VERDICTS)
    assert first == bank_weighted.expected_weighted(item, 10, "last", VERDICTS)
    assert 0.5 < first <= 1.0  # the odd samples (answer 4) carry more weight in most subsets
