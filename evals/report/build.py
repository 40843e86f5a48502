"""Reports from a run's records: summary tables (terminal, JSON, CSV, Markdown) and offline estimates.

Nothing here needs a model: ``regrade`` re-scores the recorded answers against the
recorded gold answers with the current grader (and proofs with the judges given, see
evals.report.regrade), and the sample bank re-aggregates the recorded samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evals.analysis import bank as sample_bank
from evals.analysis import bank_rows, budgets, stats
from evals.analysis.bank import Verdicts
from evals.analysis.compare import common_problems, comparison_rows, restrict, seed_of, settings_of
from evals.analysis.metrics import CI_SEED, Point, ProblemStats, matched_cost, summarize
from evals.analysis.published import published_rows
from evals.report.regrade import is_proof, regrade, write_regraded
from evals.report.render import print_report, render, table_cells
from evals.report.samples import sample_rows
from evals.run.grading import Grader
from evals.run.records import EvalRecord, RunInfo, load_records, records_path, run_infos
from paragen.cli_options import BackendChoice
from paragen.errors import ConfigError

__all__ = ["build_report", "print_report", "render", "table_cells"]

GroupKey = tuple[str, str, int, str]
"""(task, strategy, n, settings id): one row of the report."""


def problem_stats(record: EvalRecord) -> ProblemStats:
    usage = record.result.usage
    return ProblemStats(
        correct=record.grade.correct,
        latency_s=usage.latency_s,
        total_tokens=usage.total_tokens,
        sequential_tokens=usage.sequential_tokens,
        wasted_tokens=usage.wasted_tokens,
        prompt_tokens=usage.prompt_tokens,
        cached_prompt_tokens=usage.cached_prompt_tokens,
        outcome=record.grade.outcome,
        probe_tokens=usage.probe_tokens,
        score_tokens=usage.score_tokens,
        reasoning_tokens=usage.reasoning_tokens,
        answer_tokens=usage.answer_tokens,
    )


def group_records(records: Sequence[EvalRecord]) -> dict[GroupKey, list[EvalRecord]]:
    """Records by (task, strategy, n, settings), in first-seen order."""
    groups: dict[GroupKey, list[EvalRecord]] = {}
    for record in records:
        groups.setdefault((record.task, record.strategy, record.n, record.settings_id), []).append(record)
    return groups


def summary_rows(records: Sequence[EvalRecord], folder: str = "") -> list[dict[str, Any]]:
    """One row per (task, strategy, n, settings): accuracy with CI, latency, tokens, outcome counts.

    A setting run under several seeds pools them (its CI resamples problems with all their
    seeds) and adds the accuracy's mean, std, min and max across seeds.
    """
    rows = []
    for (task, strategy, n, sid), group in group_records(records).items():
        summary = summarize([problem_stats(r) for r in group]).as_dict()
        ids = {"settings_id": sid, "run_id": group[0].run_id, "folder": folder, "model": group[0].model}
        rows.append({"task": task, "strategy": strategy, "n": n, **ids, "label": "live", **summary,
                     **seed_columns(group)})  # fmt: skip
    return rows


def seed_columns(group: Sequence[EvalRecord]) -> dict[str, Any]:
    """Seeds of a setting, and (with several) the spread of accuracy across them and a pooled CI."""
    by_seed: dict[int, list[bool]] = {}
    for r in group:
        by_seed.setdefault(seed_of(r), []).append(r.grade.correct)
    if len(by_seed) < 2:
        return {"seeds": len(by_seed)}
    spread = stats.spread([sum(v) / len(v) for v in by_seed.values()])
    clusters: dict[str, list[tuple[float, float]]] = {}
    for r in group:
        clusters.setdefault(r.problem.id, []).append((float(r.grade.correct), 0.0))
    pooled = stats.paired_bootstrap(list(clusters.values()), lambda a, _b, n: a / n, seed=CI_SEED)
    return {"seeds": spread.count, "seed_acc_mean": spread.mean, "seed_acc_std": spread.std,
            "seed_acc_min": spread.low, "seed_acc_max": spread.high,
            "ci_low": pooled.low, "ci_high": pooled.high}  # fmt: skip


def bank_of(records: Sequence[EvalRecord], grader: Grader) -> tuple[dict[GroupKey, list[Any]], Verdicts]:
    """The sample bank of every group with n >= 2 whose samples hold answers, graded once."""
    banks = {}
    for key, group in group_records(records).items():
        items = [sample_bank.bank_from_record(r) for r in group]
        if key[2] >= 2 and max(len(b.answers) for b in items) >= 2:
            banks[key] = items
    pairs = [p for items in banks.values() for p in sample_bank.pairs_to_grade(items)]
    return banks, sample_bank.verdict_table(pairs, grader.compare_many(pairs))


def offline_rows(
    banks: dict[GroupKey, list[Any]], verdicts: Verdicts, folder: str = ""
) -> list[dict[str, Any]]:
    """Sample-bank estimates, labelled with what the bank holds.

    A strategy that cancels samples (FFS) leaves only its finishers in the bank, so its
    maj@k votes over those and is labelled as such: it is not what a majority run would get.
    """
    rows = []
    for (task, strategy, n, sid), items in banks.items():
        full = budgets.usable_for_budgets(items, n)
        label = sample_bank.OFFLINE if full else partial_bank_label(strategy)
        source = f"{strategy} n={n}" + (f" @{folder}" if folder else "")
        for row in bank_rows.offline_rows(items, verdicts, source=source, n=n, strategy=strategy):
            rows.append({"task": task, "settings_id": sid, "folder": folder, **row, "label": label})
    return rows


def partial_bank_label(strategy: str) -> str:
    return f"offline maj@k from {strategy}'s sample bank (only the samples it let finish)"


def budget_rows(
    banks: dict[GroupKey, list[Any]],
    verdicts: Verdicts,
    live: Sequence[dict[str, Any]],
    within: dict[str, list[float]],
) -> list[dict[str, Any]]:
    """Best accuracy per method within each budget (see evals.analysis.budgets for how each is estimated)."""
    points = []
    folder = live[0]["folder"] if live else ""
    for (task, strategy, n, _sid), items in banks.items():
        if budgets.usable_for_budgets(items, n):
            source = f"{strategy} n={n}" + (f" @{folder}" if folder else "")
            points += budgets.bank_curve(task, source, items, n, verdicts)
    rows = []
    for axis, live_key in (("total_tokens", "total_tokens"), ("latency_s", "latency_mean")):
        levels = within.get(axis) or budgets.default_budgets([float(r[live_key]) for r in live])
        rows += budgets.within(points, live, axis, levels)
    return rows


def matched_rows(rows: Sequence[dict[str, Any]], axis: str) -> list[dict[str, Any]]:
    """Best accuracy per strategy at each budget level of ``axis`` (mean tokens per problem)."""
    points = [
        Point(f"{r['strategy']} n={r['n']}", r["strategy"], float(r[axis]), float(r["accuracy"]))
        for r in rows
    ]
    return matched_cost(points)


def build_report(
    runs: Path | Sequence[Path],
    *,
    do_regrade: bool = False,
    workers: int = 2,
    baseline: str | None = None,
    all_pairs: bool = False,
    within: dict[str, list[float]] | None = None,
    judges: Sequence[BackendChoice] = (),
) -> dict[str, Any]:
    """Everything a report shows, as plain data; one ConfigError line when the records cannot be used.

    Several run folders are joined by problem: each is restricted to the problems all share.
    """
    dirs = [runs] if isinstance(runs, Path) else list(runs)
    names = folder_names(dirs)
    named, notes = _joined(dirs, names)
    with Grader(workers=workers) as grader:
        if do_regrade:
            named = [(name, regrade(records, grader, judges)) for name, records in named]
            notes += _regrade_notes(dirs, named, judges)
        folders = [name if len(named) > 1 else "" for name, _ in named]
        per_run = [_run_sections(records, folder, grader, within or {})
                   for (_, records), folder in zip(named, folders, strict=True)]  # fmt: skip
    paired, base_notes = comparison_rows(settings_of(named), baseline=baseline, all_pairs=all_pairs)
    rows = [row for part in per_run for row in part["summary"]]
    notes += partial_notes(dirs, names) + model_notes(dirs, names)
    return {
        "run": str(dirs[0]) if len(dirs) == 1 else [str(d) for d in dirs],
        "regraded": do_regrade,
        "runs": [
            _run_entry(info, name) for name, d in zip(names, dirs, strict=True) for info in run_infos(d)
        ],
        "notes": notes + base_notes,
        "summary": rows,
        "samples": [row for part in per_run for row in part["samples"]],
        "published": [
            row
            for d, (_, records), part in zip(dirs, named, per_run, strict=True)
            for row in _published(d, records, part)
        ],
        "paired": paired,
        "offline": [row for part in per_run for row in part["offline"]],
        "within_budget": [row for part in per_run for row in part["within_budget"]],
        "matched_total_tokens": matched_rows(rows, "total_tokens"),
        "matched_sequential_tokens": matched_rows(rows, "sequential_tokens"),
    }


def _joined(
    dirs: Sequence[Path], names: Sequence[str]
) -> tuple[list[tuple[str, list[EvalRecord]]], list[str]]:
    """Each folder's records that have a result, by its name, restricted to the problems all the
    folders share; and the notes on what was left out."""
    loaded = [_load(d) for d in dirs]
    notes = [f"{records_path(d)}: the last line is incomplete (a killed run) and was left out"
             for d, (_, torn) in zip(dirs, loaded, strict=True) if torn]  # fmt: skip
    named = [
        (name, _results_only(records, name, notes)) for name, (records, _) in zip(names, loaded, strict=True)
    ]
    if len(named) > 1:
        common, restricted = common_problems(named)
        named = [(name, restrict(records, common)) for name, records in named]
        notes += restricted
    return named, notes


def _run_sections(
    records: Sequence[EvalRecord], folder: str, grader: Grader, within: dict[str, list[float]]
) -> dict[str, list[dict[str, Any]]]:
    """One run's live rows, sample-bank rows and budget table."""
    rows = summary_rows(records, folder)
    banks, verdicts = bank_of(records, grader)
    return {
        "summary": rows,
        "samples": sample_rows(group_records(records), grader, verdicts, folder),
        "offline": offline_rows(banks, verdicts, folder),
        "within_budget": budget_rows(banks, verdicts, rows, within),
    }


def _regrade_notes(
    dirs: Sequence[Path], named: Sequence[tuple[str, list[EvalRecord]]], judges: Sequence[BackendChoice]
) -> list[str]:
    """Where the re-graded proofs went, or that they kept their grades (no --judge given)."""
    notes = []
    for folder, (_, records) in zip(dirs, named, strict=True):
        proofs = sum(is_proof(r) for r in records)
        if proofs and not judges:
            notes.append(
                f"{folder}: {proofs} proof records keep their judges' grades (give --judge to re-grade)"
            )
        elif proofs:
            notes.append(f"{folder}: {proofs} proof records re-graded into {write_regraded(folder, records)}")
    return notes


def folder_names(dirs: Sequence[Path]) -> list[str]:
    """A short label per run folder: its name, with its position when two share a name."""
    names = [d.name or str(d) for d in dirs]
    return [f"{n}#{i + 1}" if names.count(n) > 1 else n for i, n in enumerate(names)]


def _results_only(records: list[EvalRecord], name: str, notes: list[str]) -> list[EvalRecord]:
    """The records with a result: a failed run (it raised) has no answer, tokens or latency to average."""
    kept = [r for r in records if r.grade.outcome != "failed"]
    if len(kept) < len(records):
        where = f"{name}: " if name else ""
        notes.append(
            f"{where}{len(records) - len(kept)} of {len(records)} problems failed (the run raised; "
            "each record keeps its traceback under `failure`) and are left out of the tables; "
            "--resume runs them again"
        )
    return kept


def _load(run_dir: Path) -> tuple[list[EvalRecord], bool]:
    found = load_records(run_dir)
    if not found.records:
        raise ConfigError(
            f"{records_path(run_dir)} holds no complete record", hint="the run recorded nothing yet"
        )
    return found.latest(), found.torn_tail


def _run_entry(info: RunInfo, folder: str) -> dict[str, Any]:
    seeds: list[int | None] = [*info.seeds] or [info.settings.sampling.seed]
    return {"folder": folder, "run_id": info.run_id, "seeds": seeds, "task": info.settings.task,
            "backend": info.settings.backend, "data": info.data.model_dump(mode="json"),
            "source": info.data.describe(), "partial": info.partial,
            "prompt": None if info.prompt is None else info.prompt.name,
            "preset": None if info.preset is None else info.preset["name"],
            "model": _model_name(info), "preset_model": info.preset_model,
            "model_matches_preset": info.model_matches_preset}  # fmt: skip


def _model_name(info: RunInfo) -> str | None:
    """The answering model's name as run.json records it (None for runs written before it did)."""
    model = info.model or {}
    name = model.get("name") or model.get("id")
    return None if name is None else str(name)


def model_notes(dirs: Sequence[Path], names: Sequence[str]) -> list[str]:
    """A line per run folder whose current run used a preset on another model than the preset's."""
    return [
        f"{name}: preset {info.preset['name'] if info.preset else '?'} names {info.preset_model}, but "
        f"{_model_name(info) or 'another model'} answered: its published figures are not reproduced here"
        for d, name in zip(dirs, names, strict=True)
        for info in run_infos(d)[-1:]
        if info.model_matches_preset is False
    ]


def partial_notes(dirs: Sequence[Path], names: Sequence[str]) -> list[str]:
    """A line per run folder whose current run was interrupted before its end (run.json ``partial``)."""
    return [
        f"{name}: PARTIAL run {info.run_id}: interrupted before its end; --resume completes it"
        for d, name in zip(dirs, names, strict=True)
        for info in run_infos(d)[-1:]
        if info.partial
    ]


def _published(run_dir: Path, records: Sequence[EvalRecord], part: dict[str, Any]) -> list[dict[str, Any]]:
    """The preset's published figures beside this run's measurements (none without a preset)."""
    current = run_infos(run_dir)[-1:]
    preset = current[0].preset if current else None
    if preset is None:
        return []
    run_id = current[0].run_id
    mine = [r for r in records if r.run_id == run_id]
    summary = [r for r in part["summary"] if r["run_id"] == run_id]
    samples = [r for r in part["samples"] if r["run_id"] == run_id]
    rows = published_rows(preset, summary, samples, mine)
    on_model = current[0].model_matches_preset is not False
    return [{**row, "on_preset_model": on_model, "model": _model_name(current[0])} for row in rows]
