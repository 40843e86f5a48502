"""Pure metrics: accuracy with a bootstrap CI, unbiased pass@k, maj@k, latency and token summaries.

Nothing here runs a model or an event loop; every function takes plain numbers and
is unit-tested on known cases.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from paragen.answers import answer_key, majority_vote

CI_SEED = 20240601
"""The bootstrap's fixed seed: the same records always give the same interval."""


def accuracy(correct: Sequence[bool]) -> float:
    return sum(correct) / len(correct) if correct else 0.0


def bootstrap_ci(
    correct: Sequence[float], *, resamples: int = 2000, level: float = 0.95, seed: int = CI_SEED
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean score (problems resampled with replacement)."""
    n = len(correct)
    if n == 0:
        return (0.0, 0.0)
    rng = random.Random(seed)
    hits = [float(c) for c in correct]
    means = sorted(sum(rng.choices(hits, k=n)) / n for _ in range(resamples))
    tail = (1.0 - level) / 2.0
    return (_quantile_sorted(means, tail), _quantile_sorted(means, 1.0 - tail))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): 1 - C(n-c, k) / C(n, k), as a stable product."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def k_subsets(n: int, k: int, *, most: int, seed: int) -> Iterator[tuple[int, ...]]:
    """Every k-subset of range(n) in lexicographic order, or ``most`` of them drawn with ``seed``.

    The exact enumeration is used while there are at most ``most`` subsets; past that, each draw is
    a sorted ``random.Random(seed).sample``, so a caller's figures depend on its ``seed`` only.
    """
    if math.comb(n, k) <= most:
        yield from itertools.combinations(range(n), k)
        return
    rng = random.Random(seed)
    for _ in range(most):
        yield tuple(sorted(rng.sample(range(n), k)))


def maj_at_k(answers: Sequence[str | None], is_correct: Callable[[str], bool], k: int) -> bool:
    """Whether the majority answer of the first ``k`` samples is correct (NO_ANSWER ignored)."""
    winner = majority_vote(list(answers[:k]))
    return winner is not None and is_correct(winner)


def expected_maj_at_k(answers: Sequence[str | None], is_correct: Callable[[str], bool], k: int) -> Fraction:
    """The exact chance that the majority vote of a uniformly random k-subset is correct.

    The vote is :func:`paragen.answers.majority_vote` on the subset in its recorded order:
    NO_ANSWER ignored, ties to the answer seen first, the winner written as its first
    occurrence. So at ``k >= len(answers)`` this is 1 or 0, exactly the vote over all samples.

    It counts subsets instead of drawing them: fix the position ``p`` where the winning
    answer first appears in the subset and its count ``x``. The winner then takes ``p``
    and ``x - 1`` of its later copies, skips its earlier ones, and every other answer has
    fewer than ``x`` votes, or exactly ``x`` none of which come before ``p`` (else it
    would win the tie). Each such subset is counted once, under its true winner and ``p``.
    """
    n = len(answers)
    k = min(k, n)
    if k <= 0:
        return Fraction(0)
    keys = tuple(None if a is None else answer_key(a) for a in answers)
    correct = tuple(a is not None and is_correct(a) for a in answers)
    return Fraction(_subsets_won(keys, correct, k), math.comb(n, k))


# The report asks for the same problem's figure twice (its maj@k rows and its budget curves).
@functools.lru_cache(maxsize=1024)
def _subsets_won(keys: tuple[str | None, ...], correct: tuple[bool, ...], k: int) -> int:
    """How many k-subsets a correct answer wins, summed over the position ``p`` of its first copy."""
    no_answer = keys.count(None)
    later = Counter(key for key in keys if key is not None)  # each answer's copies after p
    earlier: Counter[str] = Counter()  # and before p
    wins = 0
    for p, own in enumerate(keys):
        if own is None:
            continue
        later[own] -= 1
        if correct[p]:
            others = [
                (earlier[key], after) for key, after in later.items() if key != own and earlier[key] + after
            ]
            wins += _subsets_won_at(later[own], others, no_answer, k)
        earlier[own] += 1
    return wins


def _subsets_won_at(later_own: int, others: Sequence[tuple[int, int]], no_answer: int, k: int) -> int:
    """How many k-subsets the answer at ``p`` wins with ``p`` its first chosen copy: ``later_own``
    copies of it after ``p``, ``others`` the other answers' (copies before p, copies after p)."""
    total = 0
    # Below this count of its own copies, the rest of the subset cannot be filled.
    fewest = max(1, k - no_answer - sum(before + after for before, after in others))
    for x in range(fewest, min(k, later_own + 1) + 1):
        room = k - x  # places left for the other answers and the NO_ANSWERs
        poly = [1]  # ways the other answers take t of those places, for t <= room
        for before, after in others:
            group = [math.comb(before + after, t) for t in range(min(x - 1, room, before + after) + 1)]
            if x <= min(room, after):
                group += [0] * (x - len(group)) + [math.comb(after, x)]
            poly = _times(poly, group, room)
        # The NO_ANSWERs fill the rest: one sum over the others' ways, not a product with their
        # own room-long polynomial (which made 512 identical answers cost minutes).
        filled = sum(ways * math.comb(no_answer, room - t) for t, ways in enumerate(poly) if ways)
        total += math.comb(later_own, x - 1) * filled
    return total


def _times(a: Sequence[int], b: Sequence[int], degree: int) -> list[int]:
    """The product of two polynomials (coefficient lists), cut after ``degree``."""
    out = [0] * (degree + 1)
    for i, ai in enumerate(a):
        if ai:
            for j, bj in enumerate(b[: degree - i + 1]):
                out[i + j] += ai * bj
    return out


def correct_by_key(verdicts: Mapping[str, bool]) -> Callable[[str], bool]:
    """A correctness lookup over answer keys, from verdicts graded once per distinct answer."""
    return lambda answer: verdicts.get(answer_key(answer), False)


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default method)."""
    if not values:
        return math.nan
    return _quantile_sorted(sorted(values), q)


def _quantile_sorted(values: Sequence[float], q: float) -> float:
    pos = q * (len(values) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (pos - low)


@dataclass(frozen=True, slots=True)
class ProblemStats:
    """What one recorded problem contributes to a summary."""

    correct: bool
    latency_s: float
    total_tokens: int
    sequential_tokens: int
    wasted_tokens: int
    prompt_tokens: int
    cached_prompt_tokens: int | None
    outcome: str = "correct"
    probe_tokens: int = 0  # generated by probes (Dynasor), apart from total_tokens
    score_tokens: int = 0  # read and written by verifiers (search strategies), apart from total_tokens
    reasoning_tokens: int = 0  # of the samples' tokens, those spent thinking (a reasoning model's)
    answer_tokens: int = 0  # ... and those after the thinking


@dataclass(frozen=True, slots=True)
class Summary:
    """One strategy/n configuration over a task: accuracy, CI, latency and token costs."""

    num_problems: int
    accuracy: float
    ci_low: float
    ci_high: float
    latency_mean: float
    latency_median: float
    latency_p95: float
    total_tokens: float  # per problem
    sequential_tokens: float
    wasted_tokens: float
    prompt_tokens: float
    cached_prompt_tokens: float | None
    total_tokens_per_correct: float | None
    sequential_tokens_per_correct: float | None
    outcomes: dict[str, int]
    probe_tokens: float = 0.0  # per problem, apart from total_tokens
    score_tokens: float = 0.0  # per problem, apart from total_tokens and prompt_tokens' samples
    reasoning_tokens: float = 0.0  # per problem: the samples' thinking
    answer_tokens: float = 0.0  # per problem: the samples' answers after their thinking

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(stats: Sequence[ProblemStats]) -> Summary:
    """Accuracy with its bootstrap CI and mean costs per problem and per correct answer."""
    n = len(stats)
    correct = [s.correct for s in stats]
    hits = sum(correct)
    latencies = [s.latency_s for s in stats]
    cached = [s.cached_prompt_tokens for s in stats if s.cached_prompt_tokens is not None]
    low, high = bootstrap_ci(correct)
    outcomes: dict[str, int] = {}
    for s in stats:
        outcomes[s.outcome] = outcomes.get(s.outcome, 0) + 1
    return Summary(
        num_problems=n,
        accuracy=accuracy(correct),
        ci_low=low,
        ci_high=high,
        latency_mean=_mean(latencies),
        latency_median=quantile(latencies, 0.5),
        latency_p95=quantile(latencies, 0.95),
        total_tokens=_mean([s.total_tokens for s in stats]),
        sequential_tokens=_mean([s.sequential_tokens for s in stats]),
        wasted_tokens=_mean([s.wasted_tokens for s in stats]),
        prompt_tokens=_mean([s.prompt_tokens for s in stats]),
        cached_prompt_tokens=_mean(cached) if cached else None,
        total_tokens_per_correct=sum(s.total_tokens for s in stats) / hits if hits else None,
        sequential_tokens_per_correct=sum(s.sequential_tokens for s in stats) / hits if hits else None,
        outcomes=dict(sorted(outcomes.items())),
        probe_tokens=_mean([s.probe_tokens for s in stats]),
        score_tokens=_mean([s.score_tokens for s in stats]),
        reasoning_tokens=_mean([s.reasoning_tokens for s in stats]),
        answer_tokens=_mean([s.answer_tokens for s in stats]),
    )


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


@dataclass(frozen=True, slots=True)
class Point:
    """One configuration on the cost/accuracy plane."""

    label: str
    strategy: str
    cost: float
    accuracy: float


def pareto_front(points: Sequence[Point]) -> list[Point]:
    """Points no other point beats (cheaper or equal cost with higher accuracy), by rising cost."""
    front: list[Point] = []
    for point in sorted(points, key=lambda p: (p.cost, -p.accuracy)):
        if not front or point.accuracy > front[-1].accuracy:
            front.append(point)
    return front


def matched_cost(points: Sequence[Point]) -> list[dict[str, Any]]:
    """Best accuracy per strategy within each cost level (the levels are the points' own costs).

    A strategy whose cheapest configuration costs more than a level has no entry there
    (None), so comparisons are only made where both strategies fit the same budget.
    """
    strategies = sorted({p.strategy for p in points})
    rows = []
    for level in sorted({p.cost for p in points}):
        row: dict[str, Any] = {"budget": level}
        for name in strategies:
            fits = [p.accuracy for p in points if p.strategy == name and p.cost <= level]
            row[name] = max(fits) if fits else None
        rows.append(row)
    return rows
