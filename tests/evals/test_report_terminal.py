"""`paragen report` in a 100-column terminal: a summary first, and no line wider, no cell cut."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from evals.cli import app
from evals.report.terminal import column_width, print_table, split_columns

runner = CliRunner()
STRATEGIES = ("single", "majority", "ffs", "best_of_n", "budget_forcing", "deepconf")


@pytest.fixture(scope="module")
def six_strategies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run") / "six"
    args = ["eval", "-t", "arith", "-s", ",".join(STRATEGIES), "--n", "1,4,8", "--backend", "scripted",
            "--limit", "2", "--no-progress", "--no-plot", "--out", str(out)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return out


def _cells(output: str) -> list[list[str]]:
    """Every body line of every table, as its cells' text."""
    return [
        [c.strip() for c in line.strip("│").split("│")]
        for line in output.splitlines()
        if line.startswith("│")
    ]


def test_the_report_reads_at_100_columns(six_strategies: Path) -> None:
    result = runner.invoke(app, ["report", str(six_strategies)], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert lines[0] == "Summary" and "6 strategies" in lines[1]
    cells = _cells(result.stdout)
    # Every strategy and the task stand whole in the cells of the live table, never folded over lines.
    for name in (*STRATEGIES, "arith"):
        assert any(name in row for row in cells), name
    # A cell folded over two lines would leave the row's other cells blank on the second line.
    assert all(all(row) for row in cells), [row for row in cells if not all(row)][:3]
    # The budget table is on its side: one row per method, its name whole.
    assert any(row[0] == "majority (bank of majority n=8)" for row in cells)
    assert any(row[0] == "live budget_forcing" for row in cells)
    assert "Live runs (1/" in result.stdout  # the 19-column table was split, its keys repeated


def test_split_repeats_the_key_columns_and_never_exceeds_the_width() -> None:
    header = ["task", "strategy", "n", *(f"column {i}" for i in range(12))]
    body = [["arith", "budget_forcing", "8", *(f"{i}.000000" for i in range(12))]]
    parts = split_columns(header, body, 60, keys=3)
    assert len(parts) > 1 and all(h[:3] == ["task", "strategy", "n"] for h, _ in parts)
    assert [c for h, _ in parts for c in h[3:]] == header[3:]  # every column once, in order
    for h, b in parts:
        assert 1 + sum(column_width(name, [row[i] for row in b]) + 3 for i, name in enumerate(h)) <= 60


def test_brackets_in_cells_and_titles_are_printed_as_written() -> None:
    # Folders and error messages are data: "[old]" or "[/]" in them is no rich markup to apply.
    out = io.StringIO()
    console = Console(file=out, width=100, color_system=None)
    print_table(console, "Failed [a]", (["folder", "error"], [["runs/x[old]", "got '[x]' and [/] here"]]))
    text = out.getvalue()
    assert "Failed [a]" in text and "runs/x[old]" in text and "got '[x]' and [/] here" in text
