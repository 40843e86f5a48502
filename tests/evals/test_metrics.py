"""Pure metrics against closed forms and fixed seeds."""

from __future__ import annotations

import math
from itertools import combinations

import pytest

from evals.analysis.metrics import (
    Point,
    ProblemStats,
    bootstrap_ci,
    k_subsets,
    maj_at_k,
    matched_cost,
    pareto_front,
    pass_at_k,
    quantile,
    summarize,
)


@pytest.mark.parametrize(
    ("n", "c", "k"), [(10, 3, 1), (10, 3, 5), (20, 0, 4), (8, 8, 3), (16, 5, 16), (5, 1, 2)]
)
def test_pass_at_k_matches_the_closed_form(n: int, c: int, k: int) -> None:
    expected = 1.0 - math.comb(n - c, k) / math.comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_k_subsets_enumerates_while_few_and_draws_seeded_samples_past_the_limit() -> None:
    assert list(k_subsets(5, 2, most=10, seed=0)) == list(combinations(range(5), 2))
    drawn = list(k_subsets(20, 10, most=2000, seed=20240603))
    assert len(drawn) == 2000 and all(list(s) == sorted(set(s)) and len(s) == 10 for s in drawn)
    # Pinned: the matched-budget and weighted-bank figures are read from exactly these draws.
    assert drawn[0] == (0, 1, 2, 4, 7, 8, 10, 11, 13, 14)
    assert next(k_subsets(20, 10, most=2000, seed=0)) == (1, 4, 5, 6, 7, 8, 12, 13, 15, 19)


def test_pass_at_k_equals_the_fraction_of_k_subsets_holding_a_correct_sample() -> None:
    samples = [True, False, False, True, False, False]
    subsets = list(combinations(samples, 3))
    assert pass_at_k(6, 2, 3) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))
    assert pass_at_k(6, 2, 1) == pytest.approx(2 / 6)


def test_pass_at_k_rejects_impossible_counts() -> None:
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_bootstrap_ci_is_fixed_by_its_seed() -> None:
    hits = [True] * 30 + [False] * 20
    low, high = bootstrap_ci(hits)
    assert (low, high) == bootstrap_ci(hits)
    assert low < 0.6 < high
    # the normal approximation gives 0.6 +- 0.136; the percentile bootstrap lands close to it
    assert low == pytest.approx(0.6 - 1.96 * math.sqrt(0.24 / 50), abs=0.03)
    assert high == pytest.approx(0.6 + 1.96 * math.sqrt(0.24 / 50), abs=0.03)
    assert bootstrap_ci(hits, seed=1) != (low, high)
    assert bootstrap_ci([True] * 10) == (1.0, 1.0)
    assert bootstrap_ci([]) == (0.0, 0.0)


def test_maj_at_k_votes_over_the_first_k_samples() -> None:
    answers = ["3", "4", "4", None, "3", "3"]
    is_three = lambda a: a == "3"  # noqa: E731
    assert maj_at_k(answers, is_three, 1)
    assert not maj_at_k(answers, is_three, 3)
    assert maj_at_k(answers, is_three, 6)
    assert not maj_at_k([None, None], is_three, 2)


def test_quantiles_interpolate_like_numpy() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert quantile(values, 0.5) == 3.0
    assert quantile(values, 0.95) == pytest.approx(8.8)
    assert math.isnan(quantile([], 0.5))


def test_summary_costs_per_problem_and_per_correct_answer() -> None:
    stats = [
        ProblemStats(True, 1.0, 100, 50, 10, 20, 5, "correct"),
        ProblemStats(False, 3.0, 300, 100, 0, 20, None, "truncated"),
    ]
    s = summarize(stats)
    assert s.accuracy == 0.5 and s.latency_mean == 2.0 and s.latency_median == 2.0
    assert s.total_tokens == 200 and s.sequential_tokens == 75 and s.wasted_tokens == 5
    assert s.total_tokens_per_correct == 400 and s.sequential_tokens_per_correct == 150
    assert s.cached_prompt_tokens == 5 and s.outcomes == {"correct": 1, "truncated": 1}


def test_pareto_front_and_matched_cost() -> None:
    points = [
        Point("a1", "a", 10, 0.3),
        Point("a4", "a", 40, 0.5),
        Point("b4", "b", 20, 0.45),
        Point("b8", "b", 80, 0.44),
    ]
    assert [p.label for p in pareto_front(points)] == ["a1", "b4", "a4"]
    rows = matched_cost(points)
    assert rows[0] == {"budget": 10, "a": 0.3, "b": None}
    assert rows[1] == {"budget": 20, "a": 0.3, "b": 0.45}
    assert rows[-1] == {"budget": 80, "a": 0.5, "b": 0.45}
