"""Budget replays from the sample bank on a hand-computed problem."""

from __future__ import annotations

from typing import Any

import pytest

from evals.analysis.bank import BankProblem
from evals.analysis.budgets import bank_curve, default_budgets, problem_curve, within
from paragen.types import Trace

# Three samples of 10, 20 and 30 tokens finishing at 1, 2 and 3 s; only the 20-token one is right.
TRACES = [Trace(id=i, completion_tokens=10 * (i + 1), start=0.0, end=float(i + 1)) for i in range(3)]
ITEM = BankProblem("p", "2", TRACES, ["1", "2", "3"])
VERDICTS = {("1", "2"): False, ("2", "2"): True, ("3", "2"): False}


def test_one_sample_is_each_sample_alone() -> None:
    got = problem_curve(ITEM, 1, VERDICTS)
    assert got["ffs"] == pytest.approx((1 / 3, 20.0, 2.0))
    assert got["majority"] == pytest.approx((1 / 3, 20.0, 2.0))
    assert got["pass@k (oracle)"] == pytest.approx((1 / 3, 20.0, 2.0))


def test_ffs_at_two_stops_every_sample_at_the_shortest() -> None:
    # {0,1}: 0 wins (wrong), 10+10 tokens, 1 s; {0,2}: 0 wins, 20 tokens, 1 s; {1,2}: 1 wins (right), 40, 2 s.
    got = problem_curve(ITEM, 2, VERDICTS)
    assert got["ffs"] == pytest.approx((1 / 3, 80 / 3, 4 / 3))
    # all samples run: tokens (30 + 40 + 50) / 3, latency the latest finish (2 + 3 + 3) / 3
    assert got["majority"][1:] == pytest.approx((40.0, 8 / 3))
    assert got["pass@k (oracle)"][0] == pytest.approx(2 / 3)


def test_all_three_vote_and_ffs_k_waits_for_the_third() -> None:
    got = problem_curve(ITEM, 3, VERDICTS)
    assert got["majority"] == pytest.approx((0.0, 60.0, 3.0))  # three answers, one vote each: the first wins
    assert got["ffs_k (k=3)"] == pytest.approx((0.0, 60.0, 3.0))
    assert got["pass@k (oracle)"][0] == 1.0


def test_within_a_budget_takes_the_best_that_fits() -> None:
    points = bank_curve("t", "majority n=3", [ITEM], 3, VERDICTS)
    live = [{"task": "t", "strategy": "single", "total_tokens": 15.0, "latency_mean": 1.0, "accuracy": 0.5}]
    rows = within(points, live, "total_tokens", [10.0, 30.0])
    assert rows[0]["live single"] is None and rows[1]["live single"] == 0.5
    assert rows[1]["ffs (bank of majority n=3)"] == pytest.approx(1 / 3)  # k=2 costs 80/3 <= 30
    assert rows[0]["majority (bank of majority n=3)"] is None
    assert default_budgets([5.0, 1.0, 3.0, 2.0, 4.0, 6.0], most=3) == [1.0, 3.0, 6.0]


@pytest.mark.parametrize(("axis", "live_key", "cost"), [("total_tokens", "total_tokens", 123.454),
                                                        ("latency_s", "latency_mean", 1.2345)])  # fmt: skip
def test_a_setting_fits_the_default_budget_at_its_own_cost_on_both_axes(axis: str, live_key: str,
                                                                        cost: float) -> None:  # fmt: skip
    # The default levels are the live costs rounded (123.45, 1.23): a cost a hair above its own
    # rounded level still fits, on the token axis and the latency axis alike.
    base: dict[str, Any] = {"task": "t", "total_tokens": 100.0, "latency_mean": 1.0}
    live = [{**base, "strategy": "majority", "accuracy": 0.4}, {**base, "strategy": "ffs", "accuracy": 0.6}]
    live[1][live_key] = cost
    levels = default_budgets([float(r[live_key]) for r in live])
    rows = within([], live, axis, levels)
    assert [r["live ffs"] for r in rows] == [None, 0.6]
    assert rows[-1]["budget"] < cost  # the level is the rounded cost, below the cost itself
