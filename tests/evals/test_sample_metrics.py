"""Per-sample metrics against values worked out by hand (see each test's comment)."""

from __future__ import annotations

import math

import pytest

from evals.analysis.sample_metrics import ProblemSamples, ks_up_to, run_accuracies, summarize_samples
from evals.report.samples import reasoning_tokens
from paragen.types import Trace

# Problem A: 3 of 4 right, the vote "1" (3 votes) is right. Problem B: 1 of 4 right, one sample
# without an answer, three answers one vote each: the tie goes to the first seen, "5", which is wrong.
A = ProblemSamples([True, False, True, True], ["1", "2", "1", "1"], [10, 20])
B = ProblemSamples([False, False, False, True], ["5", None, "6", "7"])


def test_pass1_is_the_mean_of_the_runs_with_their_spread() -> None:
    # runs (j-th sample of each problem): (1+0)/2, (0+0)/2, (1+0)/2, (1+1)/2 = .5, 0, .5, 1
    assert run_accuracies([A, B], 4) == [0.5, 0.0, 0.5, 1.0]
    s = summarize_samples([A, B])
    assert s is not None
    assert (s.problems, s.k, s.samples) == (2, 4, 8)
    assert s.pass1 == 0.5
    # sample std of (.5, 0, .5, 1): squares .25 + .25 over 3 -> sqrt(1/6); SE = std / sqrt(4)
    assert s.pass1_std == pytest.approx(math.sqrt(1 / 6))
    assert s.pass1_sem == pytest.approx(math.sqrt(1 / 6) / 2)


def test_majority_pass_at_k_no_answer_and_reasoning_tokens() -> None:
    s = summarize_samples([A, B])
    assert s is not None
    assert s.majority == 0.5  # A's vote right, B's tie to "5" wrong
    # pass@j per problem (n=4): A (c=3): .75, 1, 1, 1; B (c=1): .25, 1-3/6, 1-1/4, 1
    assert s.pass_at == pytest.approx({1: 0.5, 2: 0.75, 3: 0.875, 4: 1.0})
    assert s.no_answer == 1 / 8
    assert s.reasoning_tokens == 15.0  # A's two samples reported 10 and 20; B's none


def test_k_is_the_fewest_samples_and_one_sample_has_no_spread() -> None:
    short = ProblemSamples([True, False], ["1", "2"])
    s = summarize_samples([A, short])
    assert s is not None and s.k == 2
    assert s.pass1 == (0.5 + 0.5) / 2  # A's first two: right, wrong; short: right, wrong
    assert s.pass_at[2] == pytest.approx((1.0 + 1.0) / 2)  # A: 1 - C(1,2)/C(4,2) = 1; short: 1
    one = summarize_samples([ProblemSamples([True], ["1"]), ProblemSamples([False], [None])])
    assert one is not None and one.k == 1 and one.pass1 == 0.5
    assert one.pass1_std is None and one.pass1_sem is None and one.reasoning_tokens is None
    assert summarize_samples([]) is None
    assert summarize_samples([A, ProblemSamples([], [])]) is None


def test_pass_at_columns() -> None:
    assert ks_up_to(3) == [1, 2, 3]
    assert ks_up_to(64) == [1, 2, 4, 8, 16, 32, 64]
    assert ks_up_to(20) == [1, 2, 4, 8, 16, 20]


def test_reasoning_tokens_are_read_where_they_were_counted() -> None:
    assert reasoning_tokens(Trace(id=0)) is None  # no thinking section, or recorded before the split
    assert reasoning_tokens(Trace.model_validate_json('{"id": 0, "text": "12"}')) is None
    counted = Trace(id=0, thinking="closed", reasoning_tokens=7, reasoning_count_source="token_ids")
    assert reasoning_tokens(counted) == 7
    server = Trace(id=0, thinking="open", reasoning_tokens=0, reasoning_count_source="server")
    assert reasoning_tokens(server) == 0  # counted, and zero: reported as such
