"""From step scores to a solution's score, and from scored solutions to one answer.

Shared by the search strategies (live) and the eval bank (offline re-scoring at every k), so
an offline weighted@n of a finished run picks what the live strategy picked.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from paragen.answers import NO_ANSWER, majority_vote

Aggregate = Literal["last", "min", "prod"]
Weighting = Literal["sum", "max"]


def aggregate(steps: Sequence[float], how: Aggregate = "last") -> float:
    """A solution's score from its step scores: the last step's (search-and-learn's default),
    the weakest step's, or their product (every step right)."""
    if not steps:
        return 0.0
    if how == "last":
        return steps[-1]
    if how == "min":
        return min(steps)
    return math.prod(steps)


def weighted_answer(
    answers: Sequence[str | None], weights: Sequence[float], weighting: Weighting = "sum"
) -> str | None:
    """The answer whose solutions' scores sum highest (weighted best-of-N), or, with ``"max"``,
    the answer of the single best-scored solution (plain best-of-N). NO_ANSWER never wins; ties
    go to the answer seen first."""
    if weighting == "sum":
        return majority_vote(answers, weights)
    best = [(w, -i, a) for i, (a, w) in enumerate(zip(answers, weights, strict=True)) if a is not None]
    return max(best)[2] if best else NO_ANSWER
