"""The published figure beside the measured one, for a run made from a preset (see evals.run.presets).

For each figure of the run's preset the report finds the configuration it names (strategy,
n) among the run's rows and gives the measured value with its 95% interval, in percent:

- ``accuracy``: the live accuracy and its bootstrap interval over problems;
- ``pass@1`` / ``maj@k``: the per-sample rows (evals.analysis.sample_metrics) and their bootstrap
  intervals over problems;
- ``pass@k``: the unbiased estimate at k = n (no interval is computed for it);
- ``token_saving``: 1 - (mean total tokens of the strategy) / (mean of its baseline) on the
  problems both ran, with a paired bootstrap interval over problems (evals.analysis.stats);
- ``path_saving``: 1 - k / ``baseline_n``, k the fewest paths among the strategy's n in the run
  whose accuracy reaches the baseline's at ``baseline_n`` (CISC's "fewer paths for the same
  accuracy"); only as fine as the n the run holds, and with no interval: none when no n of the
  strategy reaches it;
- ``speedup``: (mean latency of the baseline) / (mean latency of the strategy) per problem,
  end to end, on the problems both ran, with the same paired interval; a factor (1.8 = 1.8x),
  where every other metric is in percent (each row says its ``unit``).

``within`` says whether the published value lies inside the measured interval. A figure whose
configuration the run does not hold (flags overrode it) is listed with no measurement.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from evals.analysis import stats
from evals.analysis.compare import FINISHED, seed_of
from evals.run.presets import unit_of
from evals.run.records import EvalRecord


def _find(rows: Sequence[dict[str, Any]], strategy: str, n: int | None) -> dict[str, Any] | None:
    found = [r for r in rows if r["strategy"] == strategy and (n is None or r["n"] == n)]
    return found[-1] if found else None


def _paired(records: Sequence[EvalRecord], figure: dict[str, Any], cost: str) -> list[list[stats.Pair]]:
    """(strategy's, baseline's) ``cost`` (a Usage field) per problem and seed, clustered by problem;
    records that are not results (a backend error, a run that raised) are left out, as comparisons do."""

    def per_problem(strategy: str, n: int | None) -> dict[tuple[str, int], float]:
        chosen = [
            r
            for r in records
            if r.strategy == strategy and (n is None or r.n == n) and r.grade.outcome in FINISHED
        ]
        return {(r.problem.id, seed_of(r)): float(getattr(r.result.usage, cost)) for r in chosen}

    ours = per_problem(figure["strategy"], figure["n"])
    base = per_problem(figure["baseline"], figure["baseline_n"])
    clusters: dict[str, list[stats.Pair]] = {}
    for key in sorted(ours.keys() & base.keys()):
        clusters.setdefault(key[0], []).append((ours[key], base[key]))
    return list(clusters.values())


def _token_saving(records: Sequence[EvalRecord], figure: dict[str, Any]) -> tuple[float, float, float] | None:
    clusters = _paired(records, figure, "total_tokens")
    if not clusters:
        return None
    ratio = stats.paired_bootstrap(clusters, stats.ratio_of_means)
    return 100 * (1 - ratio.value), 100 * (1 - ratio.high), 100 * (1 - ratio.low)


def _path_saving(
    summary: Sequence[dict[str, Any]], figure: dict[str, Any]
) -> tuple[float, None, None] | None:
    base = _find(summary, figure["baseline"], figure["baseline_n"])
    if base is None:
        return None
    ours = sorted((r["n"], r["accuracy"]) for r in summary if r["strategy"] == figure["strategy"])
    reaching = [n for n, accuracy in ours if accuracy >= base["accuracy"]]
    return None if not reaching else (100 * (1 - reaching[0] / figure["baseline_n"]), None, None)


def _speedup(records: Sequence[EvalRecord], figure: dict[str, Any]) -> tuple[float, float, float] | None:
    clusters = _paired(records, figure, "latency_s")
    if not clusters:
        return None
    factor = stats.paired_bootstrap(clusters, _baseline_over_ours)
    return factor.value, factor.low, factor.high


def _baseline_over_ours(ours: float, base: float, count: int) -> float:
    return base / ours if ours else math.nan


def _measured(
    figure: dict[str, Any],
    summary: Sequence[dict[str, Any]],
    samples: Sequence[dict[str, Any]],
    records: Sequence[EvalRecord],
) -> tuple[float, float | None, float | None] | None:
    """(value, low, high) in the figure's unit, or None when the run holds no such configuration."""
    metric, strategy, n = figure["metric"], figure["strategy"], figure["n"]
    if metric == "token_saving":
        return _token_saving(records, figure)
    if metric == "speedup":
        return _speedup(records, figure)
    if metric == "path_saving":
        return _path_saving(summary, figure)
    if metric == "accuracy":
        row = _find(summary, strategy, n)
        return None if row is None else (100 * row["accuracy"], 100 * row["ci_low"], 100 * row["ci_high"])
    row = _find(samples, strategy, n)
    if row is None:
        return None
    if metric == "pass@1":
        return 100 * row["pass1"], 100 * row["pass1_ci_low"], 100 * row["pass1_ci_high"]
    if metric == "maj@k":
        return 100 * row["majority"], 100 * row["majority_ci_low"], 100 * row["majority_ci_high"]
    k = n or row["k"]
    value = row["pass_at"].get(k)
    return None if value is None else (100 * value, None, None)


def published_rows(
    preset: dict[str, Any],
    summary: Sequence[dict[str, Any]],
    samples: Sequence[dict[str, Any]],
    records: Sequence[EvalRecord],
) -> list[dict[str, Any]]:
    """One row per published figure of ``preset``: the figure, the measurement and its interval."""
    rows = []
    for figure in preset.get("published", []):
        found = _measured(figure, summary, samples, records)
        value, low, high = found if found is not None else (None, None, None)
        within = None if low is None or high is None else low <= figure["value"] <= high
        rows.append({"preset": preset["name"], "metric": figure["metric"], "strategy": figure["strategy"],
                     "n": figure["n"], "unit": unit_of(figure["metric"]),
                     "baseline": figure.get("baseline"), "published": figure["value"], "measured": value,
                     "low": low, "high": high, "within": within, "source": figure["source"],
                     "note": figure["note"], "reproduced": preset.get("reproduced", False)})  # fmt: skip
    return rows
