"""The paired statistics against hand-computed cases: exact McNemar, paired bootstrap, seed spread."""

from __future__ import annotations

import math

import pytest
from evals_helpers import eval_record

from evals.analysis.compare import compare, settings_of
from evals.analysis.stats import (
    discordant,
    mcnemar_exact,
    mean_difference,
    paired_bootstrap,
    ratio_of_means,
    spread,
)
from evals.report.build import seed_columns
from evals.run.records import EvalRecord
from paragen.types import SamplingParams


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [
        (1, 9, 2 * (1 + 10) / 1024),  # 2 * P(X <= 1), X ~ Bin(10, 1/2)
        (9, 1, 2 * (1 + 10) / 1024),  # two-sided: symmetric
        (2, 8, 2 * (1 + 10 + 45) / 1024),
        (0, 5, 2 / 32),
        (0, 0, 1.0),  # no discordant pair: no evidence
        (5, 5, 1.0),  # 2 * P(X <= 5) > 1 is capped
        (600, 610, None),
    ],
)
def test_mcnemar_exact_p_matches_the_binomial_by_hand(b: int, c: int, p: float | None) -> None:
    got = mcnemar_exact(b, c)
    if p is None:  # large counts: no overflow, a probability
        assert 0.0 < got <= 1.0
        return
    assert got == pytest.approx(p, rel=1e-12)


def test_mcnemar_refuses_negative_counts() -> None:
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)


def test_discordant_counts_each_side() -> None:
    pairs = [(1.0, 0.0), (1.0, 1.0), (0.0, 1.0), (0.0, 1.0), (0.0, 0.0)]
    assert discordant(pairs) == (1, 2)


def test_a_constant_paired_difference_has_a_degenerate_interval() -> None:
    clusters = [[(1.0, 0.0)], [(0.0, -1.0)], [(2.0, 1.0)]]
    got = paired_bootstrap(clusters, mean_difference)
    assert (got.value, got.low, got.high) == (1.0, 1.0, 1.0)


def test_two_problems_one_apart_give_the_whole_range() -> None:
    # Resampled means are 0 (p 1/4), 1/2 (p 1/2) or 1 (p 1/4): the 2.5% and 97.5% points are 0 and 1.
    got = paired_bootstrap([[(1.0, 0.0)], [(0.0, 0.0)]], mean_difference)
    assert (got.value, got.low, got.high) == (0.5, 0.0, 1.0)


def test_a_problem_s_seeds_are_resampled_together() -> None:
    # Problem 1 has two seed pairs (both +1), problem 2 one (0): a resample takes both or neither of
    # problem 1's pairs, so every resampled mean is 0, 2/3 or 1, never 1/3 or 1/2.
    clusters = [[(1.0, 0.0), (1.0, 0.0)], [(0.0, 0.0)]]
    got = paired_bootstrap(clusters, mean_difference, resamples=400, level=0.0)  # level 0: the median
    assert got.value == pytest.approx(2 / 3)
    assert got.low in (0.0, pytest.approx(2 / 3), 1.0)


def test_the_bootstrap_is_fixed_by_its_seed() -> None:
    clusters = [[(float(i % 3 == 0), float(i % 2 == 0))] for i in range(30)]
    first = paired_bootstrap(clusters, mean_difference)
    assert paired_bootstrap(clusters, mean_difference) == first
    assert paired_bootstrap(clusters, mean_difference, seed=1) != first
    assert first.low <= first.value <= first.high


def test_ratio_of_means_is_the_ratio_of_sums() -> None:
    got = paired_bootstrap([[(2.0, 1.0)], [(4.0, 2.0)]], ratio_of_means)
    assert (got.value, got.low, got.high) == (2.0, 2.0, 2.0)
    assert math.isnan(paired_bootstrap([[(1.0, 0.0)]], ratio_of_means).value)


def test_spread_is_mean_sample_std_min_max() -> None:
    got = spread([0.5, 0.7, 0.6])
    assert got.count == 3
    assert (got.mean, got.std, got.low, got.high) == pytest.approx((0.6, 0.1, 0.5, 0.7))
    assert spread([0.4]).std == 0.0


def _seeded(pid: str, seed: int, outcome: str, *, strategy: str = "s", latency: float = 1.0) -> EvalRecord:
    record = eval_record(pid, outcome=outcome)
    usage = record.result.usage.model_copy(update={"latency_s": latency, "total_tokens": 10})
    result = record.result.model_copy(update={"usage": usage})
    return record.model_copy(
        update={"sampling": SamplingParams(seed=seed), "strategy": strategy, "result": result}
    )


def test_seed_columns_give_the_spread_across_seeds() -> None:
    # seed 0: 2 of 2 right; seed 1: 1 of 2; seed 2: 0 of 2 -> mean 50%, std 50%, min 0, max 100%.
    outcomes = {0: ("correct", "correct"), 1: ("correct", "incorrect"), 2: ("incorrect", "incorrect")}
    group = [
        _seeded(pid, seed, o) for seed, pair in outcomes.items() for pid, o in zip("ab", pair, strict=True)
    ]
    got = seed_columns(group)
    assert got["seeds"] == 3
    expected = (0.5, 0.5, 0.0, 1.0)
    assert (got["seed_acc_mean"], got["seed_acc_std"], got["seed_acc_min"], got["seed_acc_max"]) == expected
    assert 0.0 <= got["ci_low"] <= 0.5 <= got["ci_high"] <= 1.0
    assert seed_columns(group[:2]) == {"seeds": 1}


def test_compare_pairs_finished_problems_seed_by_seed() -> None:
    a = [_seeded("p1", 0, "correct", strategy="A", latency=2.0), _seeded("p2", 0, "correct", strategy="A"),
         _seeded("p3", 0, "error", strategy="A"), _seeded("p4", 0, "incorrect", strategy="A")]  # fmt: skip
    b = [_seeded("p1", 0, "incorrect", strategy="B"), _seeded("p2", 0, "correct", strategy="B"),
         _seeded("p3", 0, "correct", strategy="B"), _seeded("p4", 0, "correct", strategy="B")]  # fmt: skip
    first, second = settings_of([("run", a + b)])
    row = compare(first, second)
    assert (row["problems"], row["units"]) == (3, 3)  # p3 failed under A: not a result, left out
    assert (row["a_only"], row["b_only"]) == (1, 1)
    assert row["diff"] == 0.0 and row["mcnemar_p"] == 1.0
    assert row["latency_ratio"] == pytest.approx(4.0 / 3.0) and row["tokens_ratio"] == 1.0
    assert (first.label, second.label) == ("A n=1", "B n=1")
