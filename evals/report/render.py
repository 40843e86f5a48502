"""A report's tables: the terminal (rich), Markdown, CSV (the live summary) and JSON renderings."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from typing import Any

from rich.console import Console

from evals.analysis.stats import RESAMPLES

_COLUMNS = (
    ("task", "task", "{}"),
    ("strategy", "strategy", "{}"),
    ("n", "n", "{}"),
    ("problems", "num_problems", "{}"),
    ("acc", "accuracy", "{:.1%}"),
    ("95% CI", None, ""),
    ("acc across seeds", "seeds", ""),
    ("lat mean s", "latency_mean", "{:.2f}"),
    ("lat p50 s", "latency_median", "{:.2f}"),
    ("lat p95 s", "latency_p95", "{:.2f}"),
    ("total tok", "total_tokens", "{:.0f}"),
    ("seq tok", "sequential_tokens", "{:.0f}"),
    ("wasted tok", "wasted_tokens", "{:.0f}"),
    ("probe tok", "probe_tokens", "{:.0f}"),
    ("score tok", "score_tokens", "{:.0f}"),
    ("think tok", "reasoning_tokens", "{:.0f}"),
    ("answer tok", "answer_tokens", "{:.0f}"),
    ("prompt tok", "prompt_tokens", "{:.0f}"),
    ("cached", "cached_prompt_tokens", "{:.0f}"),
    ("tok/correct", "total_tokens_per_correct", "{:.0f}"),
    ("outcomes", "outcomes", "{}"),
    ("model", "model", "{}"),
    ("run", "run_id", "{}"),
    ("folder", "folder", "{}"),
)


def _ci(row: dict[str, Any]) -> str:
    return f"{row['ci_low']:.1%}-{row['ci_high']:.1%}"


def _seeds(row: dict[str, Any]) -> str:
    """Mean ± std (min-max) of accuracy over the seeds, for a setting run under several."""
    if row.get("seeds", 1) < 2:
        return "-"
    return (f"{row['seed_acc_mean']:.1%} ± {row['seed_acc_std']:.1%} "
            f"({row['seed_acc_min']:.1%}-{row['seed_acc_max']:.1%}), {row['seeds']} seeds")  # fmt: skip


def _cell(row: dict[str, Any], key: str | None, fmt: str) -> str:
    if key is None:
        return _ci(row)
    if key == "seeds":
        return _seeds(row)
    value = row.get(key)
    if value is None:
        return "-"
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items())
    return fmt.format(value)


def table_cells(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The live summary; the seeds, folder and thinking columns only where some row needs them."""
    thinking = any(r.get("reasoning_tokens") for r in rows)  # a reasoning model's: think vs answer
    columns = [
        c for c in _COLUMNS
        if (c[1] != "seeds" or any(r.get("seeds", 1) > 1 for r in rows))
        and (c[1] != "folder" or any(r.get("folder") for r in rows))
        and (c[1] != "model" or any(r.get("model") for r in rows))
        and (c[1] not in ("reasoning_tokens", "answer_tokens") or thinking)
    ]  # fmt: skip
    header = [name for name, _, _ in columns]
    return header, [[_cell(r, key, fmt) for _, key, fmt in columns] for r in rows]


PAIRED_HEADER = [
    "task", "A", "B", "problems", "pairs", "acc A", "acc B",
    f"diff A-B [95% paired bootstrap, {RESAMPLES} resamples]", "A only / B only right", "McNemar p (exact)",
    "latency A/B [95% paired bootstrap]", "tokens A/B [95% paired bootstrap]",
]  # fmt: skip


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None or math.isnan(value) else fmt.format(value)


def _interval(r: dict[str, Any], key: str, fmt: str) -> str:
    return f"{_num(r[key], fmt)} [{_num(r[key + '_low'], fmt)}, {_num(r[key + '_high'], fmt)}]"


def paired_cells(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    body = [
        [r["task"], r["a"], r["b"], str(r["problems"]), str(r["units"]), _num(r["acc_a"], "{:.1%}"),
         _num(r["acc_b"], "{:.1%}"), _interval(r, "diff", "{:+.1%}"), f"{r['a_only']} / {r['b_only']}",
         _num(r["mcnemar_p"], "{:.3g}"), _interval(r, "latency_ratio", "{:.2f}"),
         _interval(r, "tokens_ratio", "{:.2f}")]
        for r in rows
    ]  # fmt: skip
    return PAIRED_HEADER, body


def budget_cells(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Best accuracy within each budget, one column per method; '-' where nothing fits."""
    names = list(dict.fromkeys(k for r in rows for k in r if k not in ("task", "axis", "budget")))
    body = [
        [r["task"], f"{r['budget']:.0f} tok" if r["axis"] == "tokens" else f"{r['budget']:.2f} s"]
        + [_num(r.get(k), "{:.1%}") for k in names]
        for r in rows
    ]
    return ["task", "within", *names], body


def _offline_cells(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = ["task", "from", "method", "acc", "95% CI", "problems", "what it is"]
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
    """The runs and their data (a run interrupted before its end: PARTIAL after its id); the prompt
    and preset columns only where some run needs them."""
    runs = report["runs"]
    prompt = any(r.get("prompt") not in (None, "paragen") for r in runs)
    preset = any(r.get("preset") for r in runs)
    header = ["folder", "run", "task", "backend", "model", "seeds", *(["prompt"] if prompt else []),
              *(["preset"] if preset else []), "data source", "sha256", "note"]  # fmt: skip
    body = [
        [r["folder"], r["run_id"] + (" PARTIAL" if r.get("partial") else ""), r["task"], r["backend"],
         (r.get("model") or "-") + (" (not the preset's)" if r.get("model_matches_preset") is False else ""),
         ",".join(str(s) for s in r["seeds"]), *([r.get("prompt") or "-"] if prompt else []),
         *([r.get("preset") or "-"] if preset else []), r["source"].rsplit(", sha256", 1)[0],
         r["data"]["file_sha256"] or r["data"]["rows_sha256"], r["data"]["note"] or "-"]
        for r in runs
    ]  # fmt: skip
    return header, body


# k is the fewest finished samples any problem of the setting has: pass@1 and maj@k read the first
# k samples of each problem, pass@k (Chen et al.'s estimator) reads all of them, so a setting whose
# problems finished different numbers of samples (FFS) can show pass@1 != pass@k at k = 1.
SAMPLES_HEADER = [
    "task", "strategy", "n", "problems", "k (fewest samples of a problem)", "pass@1 of first k ± SE",
    "95% CI", "maj@k of first k", "pass@k from all samples", "no answer", "reasoning tok/sample", "folder",
]  # fmt: skip
SAMPLES_TITLE = (
    "Samples: k = the fewest finished samples any problem has; pass@1 and maj@k over each problem's "
    "first k, pass@k estimated from all its samples"
)


def _pct(value: float | None) -> str:
    return _num(None if value is None else 100 * value, "{:.1f}%")


def sample_cells(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Per-sample metrics (evals.analysis.sample_metrics): k samples per problem, pooled over seeds."""
    body = [
        [r["task"], r["strategy"], str(r["n"]), str(r["problems"]), str(r["k"]),
         _pct(r["pass1"]) + ("" if r["pass1_sem"] is None else f" ± {100 * r['pass1_sem']:.1f}"),
         f"{_pct(r['pass1_ci_low'])}-{_pct(r['pass1_ci_high'])}", _pct(r["majority"]),
         _pct(r["pass_at"].get(r["k"], r["pass_at"].get(str(r["k"])))), _pct(r["no_answer"]),
         _num(r["reasoning_tokens"], "{:.0f}"), r["folder"] or "-"]
        for r in rows
    ]  # fmt: skip
    return SAMPLES_HEADER, body


PUBLISHED_HEADER = ["preset", "metric", "strategy", "n", "published", "measured [95% interval]", "within",
                    "source", "note"]  # fmt: skip


def published_cells(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Each published figure of a run's preset beside the measured value (figures not reproduced here)."""
    body = []
    for r in rows:
        unit = r.get("unit", "%")
        fmt = "{:.2f}x" if unit == "x" else "{:.1f}%"  # a speedup factor, or percent
        interval = "" if r["low"] is None else f" [{fmt.format(r['low'])}, {fmt.format(r['high'])}]"
        measured = "not in this run" if r["measured"] is None else f"{fmt.format(r['measured'])}{interval}"
        within = "-" if r["within"] is None else ("yes" if r["within"] else "no")
        if r.get("on_preset_model") is False:  # measured on another model: no verdict on the figure
            within = f"n/a: ran on {r.get('model') or 'another model'}"
        metric = r["metric"] if r.get("baseline") is None else f"{r['metric']} vs {r['baseline']}"
        n = "-" if r["n"] is None else str(r["n"])
        body.append([r["preset"], metric, r["strategy"], n, f"{r['published']:g}{unit}", measured, within,
                     r["source"], r["note"] or "-"])  # fmt: skip
    return PUBLISHED_HEADER, body


def _sections(report: dict[str, Any]) -> list[tuple[str, tuple[list[str], list[list[str]]]]]:
    return [
        ("Runs and their data", _run_cells(report)),
        ("Live runs" + (" (regraded)" if report["regraded"] else ""), table_cells(report["summary"])),
        (SAMPLES_TITLE, sample_cells(report.get("samples", []))),
        (
            "Published figures (not reproduced here) beside this run's",
            published_cells(report.get("published", [])),
        ),
        ("Paired comparisons (problems both finished)", paired_cells(report["paired"])),
        ("Sample bank: offline estimates (not live runs)", _offline_cells(report["offline"])),
        (
            "Best accuracy within a budget (bank replays and live settings; see docs/evals.md)",
            budget_cells(report["within_budget"]),
        ),
        ("Best accuracy at matched total tokens", _matched_cells(report["matched_total_tokens"])),
        ("Best accuracy at matched sequential tokens", _matched_cells(report["matched_sequential_tokens"])),
    ]


def print_report(report: dict[str, Any], console: Console | None = None) -> None:
    """The report for a terminal (evals.report.terminal): a summary, then tables fitted to the width."""
    from evals.report.terminal import print_terminal

    print_terminal(report, _sections(report), console or Console())


CSV_TABLES = {"summary": ("summary", table_cells), "paired": ("paired", paired_cells),
              "budgets": ("within_budget", budget_cells)}  # fmt: skip


def render(report: dict[str, Any], fmt: str, table: str = "summary") -> str:
    """The report as json, csv (one table: summary, paired or budgets) or md (every section)."""
    if fmt == "json":
        return json.dumps(report, indent=2, allow_nan=True)
    if fmt == "csv":
        buffer = io.StringIO()
        key, cells = CSV_TABLES[table]
        header, body = cells(report[key])
        writer = csv.writer(buffer)
        writer.writerow(header)
        writer.writerows(body)
        return buffer.getvalue()
    parts = [
        f"### {title}\n\n" + md_table(header, body) for title, (header, body) in _sections(report) if body
    ]
    return "\n\n".join(parts) + "\n"


def md_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in body]
    return "\n".join(lines)
