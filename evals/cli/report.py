"""`paragen report`: a summary of run folders (accuracy with intervals, paired comparisons, offline
estimates, budgets, per-sample metrics), as a table, JSON, CSV or Markdown, and the Pareto plot.

    paragen report runs/NAME --format md --regrade --plot
    paragen report runs/PROOFS --regrade --judge openai:http://host/v1   # proofs, another judge
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from paragen.cli_options import fail, split_commas
from paragen.errors import ConfigError, ParagenError

if TYPE_CHECKING:
    from paragen.cli_options import BackendChoice

PLOT_FILE = "pareto.png"


def report_command(
    runs: Annotated[
        list[Path], typer.Argument(help="run folders written by `paragen eval` (several: side by side)")
    ],
    fmt: Annotated[str, typer.Option("--format", "-f", help="table, json, csv or md")] = "table",
    regrade: Annotated[
        bool, typer.Option(help="re-score the recorded answers with the current grader")
    ] = False,
    plot: Annotated[bool, typer.Option(help="write pareto.png beside the (first) run's records")] = False,
    baseline: Annotated[
        str | None,
        typer.Option(help="the setting each is compared with: a strategy or 'NAME n=N' (default: single)"),
    ] = None,
    pairs: Annotated[
        str, typer.Option(help="baseline (each against the baseline) or all (every pair)")
    ] = "baseline",
    within_tokens: Annotated[
        str | None, typer.Option(help="comma-separated total-token budgets per problem for the budget table")
    ] = None,
    within_latency: Annotated[
        str | None, typer.Option(help="comma-separated latency budgets per problem (s) for the budget table")
    ] = None,
    csv_table: Annotated[str, typer.Option(help="with --format csv: summary, paired or budgets")] = "summary",
    judge: Annotated[
        list[str],
        typer.Option(
            "--judge", metavar="SPEC", help="with --regrade: re-grade proofs with this judge (repeatable)"
        ),
    ] = [],  # noqa: B006
) -> None:
    """Summarize runs' records: accuracy with CIs, paired comparisons, offline estimates, budgets."""
    from evals.report.plots import require_plotting

    try:
        if plot:
            require_plotting()
        options = _report_options(baseline, pairs, within_tokens, within_latency, csv_table)
        if judge and not regrade:
            raise ConfigError("--judge re-grades proofs: give it with --regrade")
        show_report(runs, fmt=fmt, do_regrade=regrade, plot=plot, judges=_judges(judge), **options)
    except ParagenError as exc:
        fail(exc)


def _judges(specs: list[str]) -> list[BackendChoice]:
    """The judges of ``--judge``, each spec checked now; built where they judge (one event loop)."""
    from paragen.cli_options import choose_backend

    return [choose_backend(spec, model=None, base_url=None, options=[]) for spec in specs]


def _report_options(
    baseline: str | None, pairs: str, tokens: str | None, latency: str | None, csv_table: str
) -> dict[str, Any]:
    if pairs not in ("baseline", "all"):
        raise ConfigError(f"unknown --pairs {pairs!r}", hint="use baseline or all")
    if csv_table not in ("summary", "paired", "budgets"):
        raise ConfigError(f"unknown --csv-table {csv_table!r}", hint="use summary, paired or budgets")
    within = {
        "total_tokens": _budgets(tokens, "--within-tokens"),
        "latency_s": _budgets(latency, "--within-latency"),
    }
    return {"baseline": baseline, "all_pairs": pairs == "all", "within": within, "csv_table": csv_table}


def _budgets(text: str | None, flag: str) -> list[float]:
    if text is None:
        return []
    try:
        values = [float(part) for part in split_commas(text)]
    except ValueError:
        values = []
    if not values or any(not v > 0 or v == float("inf") for v in values):
        raise ConfigError(f"bad {flag} {text!r}", hint="give positive numbers separated by commas")
    return values


def _run_folder(path: Path) -> Path:
    """A run folder, also when the user names its records file (``paragen report RUN/records.jsonl``)."""
    if path.name == "records.jsonl" and path.is_file():
        return path.parent
    if path.is_file():
        raise ConfigError(f"{path} is a file", hint="give the run folder (the one that holds records.jsonl)")
    return path


def show_report(runs: Path | list[Path], *, fmt: str, do_regrade: bool, plot: bool, **options: Any) -> None:
    from evals.report.build import build_report, print_report, render

    runs = [_run_folder(run) for run in ([runs] if isinstance(runs, Path) else runs)]
    csv_table = options.pop("csv_table", "summary")
    if fmt not in ("table", "json", "csv", "md"):
        raise ConfigError(f"unknown format {fmt!r}", hint="use table, json, csv or md")
    for run in runs:
        if not (run / "records.jsonl").exists():
            raise ConfigError(f"no records in {run}", hint="run `paragen eval ... --out RUN` first")
    report = build_report(runs, do_regrade=do_regrade, **options)
    for note in report["notes"]:
        typer.echo(note, err=True)
    if fmt == "table":
        print_report(report)
    else:
        sys.stdout.write(render(report, fmt, csv_table))
    if plot and report["summary"]:
        from evals.report.plots import plot_pareto

        path = plot_pareto(report["summary"], runs[0] / PLOT_FILE, runs=runs)
        typer.echo(f"plot: {path}", err=fmt != "table")
