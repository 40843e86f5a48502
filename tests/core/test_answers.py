"""Answer extraction, canonical keys, voting and the adaptive-consistency stopping rule (pure functions)."""

from __future__ import annotations

from math import comb

import pytest

from paragen.answers import NO_ANSWER, answer_key, equivalent, extract_answer, last_boxed, majority_vote
from strategies.adaptive import beta_leader_probability, should_stop

EXTRACT_CASES = [
    ("so \\boxed{12}.", "12"),
    ("first \\boxed{3} then \\boxed{4}", "4"),
    ("nested \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("\\boxed{} empty then nothing", NO_ANSWER),
    ("unbalanced \\boxed{12", "12"),  # falls back to the last number
    ("The answer is 42.", "42"),
    ("Final answer: $x = 3$\n", "x = 3"),
    ("#### 1,234", "1,234"),
    ("we get 3, then 1,000 apples", "1000"),
    ("no digits here", NO_ANSWER),
    ("\\fbox{7} and later \\boxed{8}", "8"),
    ("-5 is it", "-5"),
]


@pytest.mark.parametrize(("text", "expected"), EXTRACT_CASES)
def test_extract_answer(text: str, expected: str | None) -> None:
    assert extract_answer(text) == expected


def test_extract_modes_do_not_fall_back() -> None:
    assert extract_answer("The answer is 5", mode="boxed") is None
    assert extract_answer("\\boxed{5}", mode="answer_is") is None
    assert extract_answer("a 1 b 2", mode="last_number") == "2"
    assert last_boxed("x \\boxed{a{b}c} y") == "a{b}c"


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("1,000", "1000"),
        ("12.0", "12"),
        ("$12$", "12"),
        ("\\text{12}", "12"),
        ("\\dfrac{1}{2}", "\\frac{1}{2}"),
        ("0.50", "0.5"),
        ("x = 3.", "x=3"),
    ],
)
def test_answer_key_groups_equal_forms(a: str, b: str) -> None:
    assert answer_key(a) == answer_key(b)


def test_majority_vote_ignores_no_answer_and_breaks_ties_by_first_seen() -> None:
    assert majority_vote([None, "3", "4", "3.0", None, None]) == "3"
    assert majority_vote(["4", "3", "3", "4"]) == "4"
    assert majority_vote([None, None]) is NO_ANSWER
    assert majority_vote(["1", "2", "2"], weights=[5.0, 1.0, 1.0]) == "1"


def test_equivalent_uses_math_verify() -> None:
    assert equivalent("\\frac{1}{2}", "0.5")
    assert equivalent("\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\pi/2)")
    assert not equivalent("3", "4")
    assert not equivalent(None, "4")


def test_beta_leader_probability_matches_the_incomplete_beta() -> None:
    # P(Bin(v1+v2+1, 1/2) <= v1), computed independently
    for v1, v2 in [(0, 0), (3, 1), (5, 0), (4, 4), (10, 2)]:
        n = v1 + v2 + 1
        expected = sum(comb(n, j) for j in range(v1 + 1)) / 2**n
        assert beta_leader_probability(v1, v2) == pytest.approx(expected)
    assert beta_leader_probability(0, 0) == 0.5
    assert beta_leader_probability(4, 0) > 0.95 > beta_leader_probability(3, 0)


def test_should_stop_when_leader_settled_or_unbeatable() -> None:
    assert not should_stop(["1", "1"], max_samples=16, threshold=0.95)
    assert should_stop(["1"] * 5, max_samples=16, threshold=0.95)
    assert should_stop(["1", "1", "1", "2"], max_samples=5, threshold=0.99)  # one left cannot even tie 3 vs 1
    assert not should_stop(["1", "1", "2"], max_samples=4, threshold=0.99)  # one left could tie 2 vs 1
    assert not should_stop([None, None], max_samples=16, threshold=0.95)
