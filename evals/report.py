"""Reports from a run's records: summary tables (terminal, JSON, CSV, Markdown) and offline estimates.

Nothing here needs a model: ``regrade`` re-scores the recorded answers against the
recorded gold answers with the current grader, and the sample bank re-aggregates the
recorded samples.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from evals import bank as sample_bank
from evals.grading import Grader
from evals.metrics import Point, ProblemStats, matched_cost, summarize
from evals.records import EvalRecord, GradeRecord, RunInfo, load_records, records_path, run_infos
from paragen.errors import ConfigError

GroupKey = tuple[str, str, int, str]
"""(task, strategy, n, settings id): one row of the report."""


def regrade(records: list[EvalRecord], grader: Grader) -> list[EvalRecord]:
    """The records with their grades recomputed from the recorded answers (no model involved)."""
    grades = grader.grade_many([(r.result, r.problem.gold) for r in records])
    return [
        r.model_copy(update={"grade": GradeRecord.model_validate(g.as_dict())})
        for r, g in zip(records, grades, strict=True)
    ]


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
    )


def group_records(records: Sequence[EvalRecord]) -> dict[GroupKey, list[EvalRecord]]:
    """Records by (task, strategy, n, settings), in first-seen order."""
    groups: dict[GroupKey, list[EvalRecord]] = {}
    for record in records:
        groups.setdefault((record.task, record.strategy, record.n, record.settings_id), []).append(record)
    return groups


def summary_rows(records: Sequence[EvalRecord]) -> list[dict[str, Any]]:
    """One row per (task, strategy, n, settings): accuracy with CI, latency, tokens, outcome counts."""
    rows = []
    for (task, strategy, n, sid), group in group_records(records).items():
        summary = summarize([problem_stats(r) for r in group])
        ids = {"settings_id": sid, "run_id": group[0].run_id}
        rows.append({"task": task, "strategy": strategy, "n": n, **ids, "label": "live", **summary.as_dict()})
    return rows


def offline_rows(records: Sequence[EvalRecord], grader: Grader) -> list[dict[str, Any]]:
    """Sample-bank estimates for every group of a strategy with n >= 2 whose samples hold answers."""
    banks = {}
    for key, group in group_records(records).items():
        items = [sample_bank.bank_from_record(r) for r in group]
        if key[2] >= 2 and max(len(b.answers) for b in items) >= 2:
            banks[key] = items
    pairs = [p for items in banks.values() for p in sample_bank.pairs_to_grade(items)]
    verdicts = sample_bank.verdict_table(pairs, grader.compare_many(pairs))
    rows = []
    for (task, strategy, n, sid), items in banks.items():
        for row in sample_bank.offline_rows(items, verdicts, source=f"{strategy} n={n}", n=n):
            rows.append({"task": task, "settings_id": sid, **row})
    return rows


def matched_rows(rows: Sequence[dict[str, Any]], axis: str) -> list[dict[str, Any]]:
    """Best accuracy per strategy at each budget level of ``axis`` (mean tokens per problem)."""
    points = [
        Point(f"{r['strategy']} n={r['n']}", r["strategy"], float(r[axis]), float(r["accuracy"]))
        for r in rows
    ]
    return matched_cost(points)


def build_report(run_dir: Path, *, do_regrade: bool = False, workers: int = 2) -> dict[str, Any]:
    """Everything a report shows, as plain data; one ConfigError line when the records cannot be used."""
    found = load_records(run_dir)
    if not found.records:
        raise ConfigError(
            f"{records_path(run_dir)} holds no complete record", hint="the run recorded nothing yet"
        )
    records = found.latest()
    notes = [f"{records_path(run_dir)}: the last line is incomplete (a killed run) and was left out"]
    with Grader(workers=workers) as grader:
        if do_regrade:
            records = regrade(records, grader)
        rows = summary_rows(records)
        offline = offline_rows(records, grader)
    return {
        "run": str(run_dir),
        "regraded": do_regrade,
        "runs": [_run_entry(info) for info in run_infos(run_dir)],
        "notes": notes if found.torn_tail else [],
        "summary": rows,
        "offline": offline,
        "matched_total_tokens": matched_rows(rows, "total_tokens"),
        "matched_sequential_tokens": matched_rows(rows, "sequential_tokens"),
    }


def _run_entry(info: RunInfo) -> dict[str, Any]:
    return {"run_id": info.run_id, "task": info.settings.task, "backend": info.settings.backend,
            "data": info.data.model_dump(mode="json"), "source": info.data.describe()}  # fmt: skip


_COLUMNS = (
    ("task", "task", "{}"),
    ("strategy", "strategy", "{}"),
    ("n", "n", "{}"),
    ("problems", "num_problems", "{}"),
    ("acc", "accuracy", "{:.1%}"),
    ("95% CI", None, ""),
    ("lat mean s", "latency_mean", "{:.2f}"),
    ("lat p50 s", "latency_median", "{:.2f}"),
    ("lat p95 s", "latency_p95", "{:.2f}"),
    ("total tok", "total_tokens", "{:.0f}"),
    ("seq tok", "sequential_tokens", "{:.0f}"),
    ("wasted tok", "wasted_tokens", "{:.0f}"),
    ("probe tok", "probe_tokens", "{:.0f}"),
    ("prompt tok", "prompt_tokens", "{:.0f}"),
    ("cached", "cached_prompt_tokens", "{:.0f}"),
    ("tok/correct", "total_tokens_per_correct", "{:.0f}"),
    ("outcomes", "outcomes", "{}"),
    ("run", "run_id", "{}"),
)


def _ci(row: dict[str, Any]) -> str:
    return f"{row['ci_low']:.1%}-{row['ci_high']:.1%}"


def _cell(row: dict[str, Any], key: str | None, fmt: str) -> str:
    if key is None:
        return _ci(row)
    value = row.get(key)
    if value is None:
        return "-"
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items())
    return fmt.format(value)


def table_cells(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = [name for name, _, _ in _COLUMNS]
    return header, [[_cell(r, key, fmt) for _, key, fmt in _COLUMNS] for r in rows]


def _offline_cells(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = ["task", "from", "method", "acc", "95% CI", "problems", "label"]
    body = [
        [
            r["task"],
            r["source"],
            r["method"],
            f"{r['accuracy']:.1%}",
            _ci(r),
            str(r["num_problems"]),
            r["label"],
        ]
        for r in rows
    ]
    return header, body


def _matched_cells(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    names = [k for k in rows[0] if k != "budget"] if rows else []
    body = [[f"{r['budget']:.0f}"] + ["-" if r[k] is None else f"{r[k]:.1%}" for k in names] for r in rows]
    return ["budget (tokens)", *names], body


def _run_cells(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["run", "task", "backend", "data source", "sha256", "note"]
    body = [
        [r["run_id"], r["task"], r["backend"], r["source"].rsplit(", sha256", 1)[0],
         r["data"]["file_sha256"] or r["data"]["rows_sha256"], r["data"]["note"] or "-"]
        for r in report["runs"]
    ]  # fmt: skip
    return header, body


def _sections(report: dict[str, Any]) -> list[tuple[str, tuple[list[str], list[list[str]]]]]:
    return [
        ("Runs and their data", _run_cells(report)),
        ("Live runs" + (" (regraded)" if report["regraded"] else ""), table_cells(report["summary"])),
        ("Sample bank: offline estimates (not live runs)", _offline_cells(report["offline"])),
        ("Best accuracy at matched total tokens", _matched_cells(report["matched_total_tokens"])),
        ("Best accuracy at matched sequential tokens", _matched_cells(report["matched_sequential_tokens"])),
    ]


def print_report(report: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    if not console.is_terminal and console.width < 150:
        console.width = 200  # a pipe or a log file: wide rows beat folded cells
    for title, (header, body) in _sections(report):
        if not body:
            continue
        table = Table(title=title, title_justify="left")
        for name in header:
            table.add_column(name, overflow="fold")
        for line in body:
            table.add_row(*line)
        console.print(table)


def render(report: dict[str, Any], fmt: str) -> str:
    """The report as json, csv (the live summary) or md (every section as a Markdown table)."""
    if fmt == "json":
        return json.dumps(report, indent=2)
    if fmt == "csv":
        buffer = io.StringIO()
        header, body = table_cells(report["summary"])
        writer = csv.writer(buffer)
        writer.writerow(header)
        writer.writerows(body)
        return buffer.getvalue()
    parts = []
    for title, (header, body) in _sections(report):
        if body:
            lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in body]
            parts.append(f"### {title}\n\n" + "\n".join(lines))
    return "\n\n".join(parts) + "\n"
