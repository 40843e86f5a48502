"""Paired statistics for comparing two settings on the same problems, and spread across seeds.

Pure functions of plain numbers, unit-tested on hand-computed cases:

- :func:`mcnemar_exact`: the exact two-sided McNemar test, a binomial test on the discordant
  pairs (b problems only A solved, c only B solved; under no difference each is 1/2).
- :func:`paired_bootstrap`: a percentile interval for a statistic of paired sums, resampling
  whole clusters (problems; a problem run under several seeds carries all its pairs along),
  with a fixed seed and a stated number of resamples.
- :func:`spread`: mean, sample standard deviation, min and max of per-seed values.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

RESAMPLES = 2000
"""Bootstrap resamples used by the report's paired intervals (stated in its headings)."""
PAIRED_SEED = 20240602
"""The paired bootstrap's fixed seed: the same records always give the same interval."""

Pair = tuple[float, float]
"""One paired unit: (value under A, value under B)."""
SumsStat = Callable[[float, float, int], float]
"""A statistic of (sum over A, sum over B, number of units)."""


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p: 2 * P(X <= min(b, c)) for X ~ Binomial(b + c, 1/2), at most 1.

    ``b`` and ``c`` are the discordant counts (A right and B wrong, and the reverse). With no
    discordant pair there is no evidence either way: p = 1.
    """
    if b < 0 or c < 0:
        raise ValueError(f"counts must be non-negative, got b={b} c={c}")
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1))
    return float(min(Fraction(1), Fraction(2 * tail, 2**n)))


def mean_difference(sum_a: float, sum_b: float, count: int) -> float:
    return (sum_a - sum_b) / count if count else math.nan


def ratio_of_means(sum_a: float, sum_b: float, count: int) -> float:
    return sum_a / sum_b if sum_b else math.nan


@dataclass(frozen=True, slots=True)
class Interval:
    """A point estimate with its percentile bootstrap interval."""

    value: float
    low: float
    high: float


def paired_bootstrap(
    clusters: Sequence[Sequence[Pair]],
    stat: SumsStat,
    *,
    resamples: int = RESAMPLES,
    level: float = 0.95,
    seed: int = PAIRED_SEED,
) -> Interval:
    """``stat`` on all pairs, with the percentile interval over ``resamples`` cluster resamples.

    Each resample draws as many clusters as there are, with replacement, and keeps each drawn
    cluster's pairs together, so A and B stay paired and repeated runs of a problem (seeds)
    are not counted as independent problems. Resamples whose statistic is NaN (a ratio over a
    zero sum) are left out of the quantiles.
    """
    sums = [(sum(a for a, _ in c), sum(b for _, b in c), len(c)) for c in clusters if c]
    if not sums:
        return Interval(math.nan, math.nan, math.nan)
    value = stat(sum(s[0] for s in sums), sum(s[1] for s in sums), sum(s[2] for s in sums))
    rng = random.Random(seed)
    draws = []
    for _ in range(resamples):
        picked = rng.choices(sums, k=len(sums))
        draw = stat(sum(p[0] for p in picked), sum(p[1] for p in picked), sum(p[2] for p in picked))
        if not math.isnan(draw):
            draws.append(draw)
    if not draws:
        return Interval(value, math.nan, math.nan)
    draws.sort()
    tail = (1.0 - level) / 2.0
    return Interval(value, _quantile(draws, tail), _quantile(draws, 1.0 - tail))


def _quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of sorted values (numpy's default method)."""
    pos = q * (len(values) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (pos - low)


def discordant(pairs: Sequence[Pair]) -> tuple[int, int]:
    """(b, c): pairs right under A only, and under B only (values are 1.0 or 0.0)."""
    b = sum(1 for a, o in pairs if a and not o)
    c = sum(1 for a, o in pairs if o and not a)
    return b, c


@dataclass(frozen=True, slots=True)
class Spread:
    """Per-seed values summarized: mean, sample std (n - 1; 0 for one seed), min and max."""

    count: int
    mean: float
    std: float
    low: float
    high: float


def spread(values: Sequence[float]) -> Spread:
    if not values:
        return Spread(0, math.nan, math.nan, math.nan, math.nan)
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return Spread(n, mean, std, min(values), max(values))
