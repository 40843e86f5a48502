"""Paired comparisons between strategy settings, within one run or across runs.

A *setting* is one (run, task, strategy, n, settings id). Two settings of a task are joined
on the problems both finished: a problem is its task, id and question (so two data sources
that number problems alike but hold other questions are not joined), and a unit is a
problem under one seed, the i-th seed of A paired with the i-th seed of B. A unit counts
only when both records have a graded result (not a backend or grader failure).

For each pair: the accuracy difference A - B with a paired cluster bootstrap interval (a
problem's seeds resampled together), the exact McNemar p on the discordant units, and the
ratios of mean latency and of mean total tokens (A over B) with the same bootstrap.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from evals.analysis.stats import (
    RESAMPLES,
    Pair,
    discordant,
    mcnemar_exact,
    mean_difference,
    paired_bootstrap,
    ratio_of_means,
)
from evals.run.records import EvalRecord
from paragen.errors import ConfigError

FINISHED = frozenset({"correct", "incorrect", "no_answer", "truncated"})
"""Outcomes that are results of the model; error, grader_timeout and grader_error are not."""
DEFAULT_BASELINE = "single"
ProblemKey = tuple[str, str, str]
"""(task, problem id, sha256 of the question): what joins records across runs."""


def problem_key(record: EvalRecord) -> ProblemKey:
    digest = hashlib.sha256(record.problem.question.encode()).hexdigest()[:16]
    return (record.task, record.problem.id, digest)


def seed_of(record: EvalRecord) -> int:
    """The sampling seed of a record; -1 for a run without one (one unseeded sweep)."""
    return -1 if record.sampling.seed is None else record.sampling.seed


@dataclass
class Setting:
    """One strategy setting of one run, with its records by problem (each list sorted by seed)."""

    run: str
    task: str
    strategy: str
    n: int
    settings_id: str
    label: str = ""
    by_problem: dict[ProblemKey, list[EvalRecord]] = field(default_factory=dict)

    @property
    def seeds(self) -> list[int]:
        return sorted({seed_of(r) for rs in self.by_problem.values() for r in rs})


def settings_of(runs: Sequence[tuple[str, Sequence[EvalRecord]]]) -> list[Setting]:
    """Every setting of the runs, in first-seen order, labelled unambiguously."""
    found: dict[tuple[str, str, str, int, str], Setting] = {}
    for run, records in runs:
        for r in records:
            key = (run, r.task, r.strategy, r.n, r.settings_id)
            setting = found.setdefault(key, Setting(run, r.task, r.strategy, r.n, r.settings_id))
            setting.by_problem.setdefault(problem_key(r), []).append(r)
    settings = list(found.values())
    for s in settings:
        s.by_problem = {k: sorted(v, key=seed_of) for k, v in s.by_problem.items()}
    _label(settings, multi_run=len(runs) > 1)
    return settings


def _label(settings: Sequence[Setting], *, multi_run: bool) -> None:
    names = [(s.run, s.task, s.strategy, s.n) for s in settings]
    for s, name in zip(settings, names, strict=True):
        s.label = f"{s.strategy} n={s.n}"
        if names.count(name) > 1:  # --new-run: two settings of one strategy in one folder
            s.label += f" [{s.settings_id[:6]}]"
        if multi_run:
            s.label += f" @{s.run}"


def paired_units(a: Setting, b: Setting) -> list[list[tuple[EvalRecord, EvalRecord]]]:
    """Per common problem, the (A, B) record pairs both finished (i-th seed with i-th seed)."""
    clusters = []
    for key, records_a in a.by_problem.items():
        records_b = b.by_problem.get(key)
        if not records_b:
            continue
        pairs = [
            (ra, rb)
            for ra, rb in zip(records_a, records_b, strict=False)
            if ra.grade.outcome in FINISHED and rb.grade.outcome in FINISHED
        ]
        if pairs:
            clusters.append(pairs)
    return clusters


def compare(a: Setting, b: Setting) -> dict[str, Any]:
    """One row: accuracy difference, McNemar p, latency and token ratios, A against B."""
    clusters = paired_units(a, b)
    acc = [[(float(x.grade.correct), float(y.grade.correct)) for x, y in c] for c in clusters]
    lat = [[(x.result.usage.latency_s, y.result.usage.latency_s) for x, y in c] for c in clusters]
    tok = [[(float(x.result.usage.total_tokens), float(y.result.usage.total_tokens)) for x, y in c]
           for c in clusters]  # fmt: skip
    flat: list[Pair] = [p for c in acc for p in c]
    b_only, c_only = discordant(flat)
    diff = paired_bootstrap(acc, mean_difference)
    lat_ratio = paired_bootstrap(lat, ratio_of_means)
    tok_ratio = paired_bootstrap(tok, ratio_of_means)
    units = len(flat)
    row = {
        "task": a.task, "a": a.label, "b": b.label, "problems": len(clusters), "units": units,
        "acc_a": sum(x for x, _ in flat) / units if units else None,
        "acc_b": sum(y for _, y in flat) / units if units else None,
        "diff": diff.value, "diff_low": diff.low, "diff_high": diff.high,
        "a_only": b_only, "b_only": c_only, "mcnemar_p": mcnemar_exact(b_only, c_only),
        "latency_ratio": lat_ratio.value, "latency_ratio_low": lat_ratio.low,
        "latency_ratio_high": lat_ratio.high,
        "tokens_ratio": tok_ratio.value, "tokens_ratio_low": tok_ratio.low,
        "tokens_ratio_high": tok_ratio.high, "resamples": RESAMPLES,
    }  # fmt: skip
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}


def find_baseline(settings: Sequence[Setting], task: str, name: str) -> Setting | None:
    """The first setting of ``task`` whose label or strategy is ``name`` (runs in the order given)."""
    for s in settings:
        if s.task == task and name in (s.label, s.strategy, f"{s.strategy} n={s.n}"):
            return s
    return None


def comparison_rows(
    settings: Sequence[Setting], *, baseline: str | None, all_pairs: bool
) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows of the paired table and notes (a fallback baseline is said, never silent).

    ``baseline=None`` means the default, ``single``, falling back to each task's first setting;
    a baseline named on purpose that no task has is a ConfigError.
    """
    tasks = list(dict.fromkeys(s.task for s in settings))
    if all_pairs:
        groups = [_of(settings, t) for t in tasks]
        return [compare(a, b) for group in groups for i, a in enumerate(group) for b in group[i + 1 :]], []
    name = baseline or DEFAULT_BASELINE
    found = {t: find_baseline(settings, t, name) for t in tasks}
    if baseline is not None and not any(found.values()):
        labels = ", ".join(dict.fromkeys(s.label for s in settings))
        raise ConfigError(f"unknown baseline {baseline!r}", hint=f"choose one of: {labels}")
    rows, notes = [], []
    for task in tasks:
        base = found[task] or _of(settings, task)[0]
        if found[task] is None:
            notes.append(f"{task}: no {name!r} setting; each setting is compared with {base.label!r}")
        rows += [compare(s, base) for s in _of(settings, task) if s is not base]
    return rows, notes


def _of(settings: Sequence[Setting], task: str) -> list[Setting]:
    return [s for s in settings if s.task == task]


def common_problems(runs: Sequence[tuple[str, Sequence[EvalRecord]]]) -> tuple[set[ProblemKey], list[str]]:
    """The problems every run holds, and a note per run that held others; ConfigError if none."""
    held = [(name, {problem_key(r) for r in records}) for name, records in runs]
    common = set.intersection(*(keys for _, keys in held))
    if not common:
        names = ", ".join(name for name, _ in held)
        raise ConfigError(
            f"the runs {names} have no problem in common",
            hint="compare runs of the same task and data (problems are joined by id and question)",
        )
    notes = [
        f"{name}: {len(keys)} problems, restricted to the {len(common)} all runs share"
        for name, keys in held
        if keys != common
    ]
    return common, notes


def restrict(records: Sequence[EvalRecord], keep: set[ProblemKey]) -> list[EvalRecord]:
    return [r for r in records if problem_key(r) in keep]
