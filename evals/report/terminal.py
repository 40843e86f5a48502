"""The report in a terminal: a one-screen summary, then every table fitted to the console's width.

No cell is ever cut: a table wider than the console is split into column groups, each repeating
the columns that name a row (task, strategy, n), and a header wraps only between its words. The
budget table is turned on its side (one row per method, one column per budget), because it has
a column per method. Markdown, CSV and JSON (evals.report.render) keep every column in one table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from evals.analysis.metrics import Point, pareto_front

Cells = tuple[list[str], list[list[str]]]

# Columns that name a row, repeated in every part of a split table, by the table's first column.
KEY_COLUMNS = {"task": 3, "folder": 1, "preset": 2, "budget (tokens)": 1, "method": 1}
BORDER = 3  # a column's share of rich's box: one rule and a space each side


def column_width(header: str, cells: Sequence[str]) -> int:
    """The narrowest a column can be without cutting a cell or a word of its header."""
    return max([len(c) for c in cells] + [len(w) for w in header.split()] + [1])


def split_columns(header: Sequence[str], body: Sequence[Sequence[str]], width: int, keys: int) -> list[Cells]:
    """The table as parts no wider than ``width``: each part holds the first ``keys`` columns and as
    many of the rest as fit. A column too wide to go beside the keys goes alone."""
    widths = [column_width(h, [row[i] for row in body]) for i, h in enumerate(header)]
    keys = min(keys, len(header) - 1)
    key_width = 1 + sum(w + BORDER for w in widths[:keys])
    groups: list[list[int]] = []
    used = key_width
    for i in range(keys, len(header)):
        need = widths[i] + BORDER
        if not groups or used + need > width:
            alone = key_width + need > width
            groups.append([] if alone else list(range(keys)))
            used = 1 if alone else key_width
        groups[-1].append(i)
        used += need
    if not groups:
        groups = [list(range(len(header)))]
    return [([header[i] for i in g], [[row[i] for i in g] for row in body]) for g in groups]


def fit_widths(header: Sequence[str], body: Sequence[Sequence[str]], width: int) -> list[int]:
    """Each column's width: the narrowest that cuts nothing, widened (left to right) so that a
    header sits on one line where the console has room for it."""
    widths = [column_width(h, [row[i] for row in body]) for i, h in enumerate(header)]
    room = width - 1 - sum(w + BORDER for w in widths)
    for i, name in enumerate(header):
        grow = min(max(0, len(name) - widths[i]), max(0, room))
        widths[i] += grow
        room -= grow
    return widths


def print_table(console: Console, title: str, cells: Cells) -> None:
    """One table, split into parts where it is wider than the console."""
    header, body = cells
    parts = split_columns(header, body, console.width, KEY_COLUMNS.get(header[0], 1))
    for number, (part_header, part_body) in enumerate(parts, 1):
        suffix = f" ({number}/{len(parts)})" if len(parts) > 1 else ""
        # Escaped: a cell is data (a folder, an error message), and "[x]" in it is no markup tag.
        table = Table(title=escape(title + suffix), title_justify="left")
        for name, width in zip(part_header, fit_widths(part_header, part_body, console.width), strict=True):
            table.add_column(escape(name), width=width, overflow="fold")
        for row in part_body:
            table.add_row(*(escape(cell) for cell in row))
        console.print(table)


def budget_sideways(rows: Sequence[dict[str, Any]]) -> list[tuple[str, Cells]]:
    """The budget table per task and axis: one row per method, one column per budget."""
    tables = []
    for task in dict.fromkeys(r["task"] for r in rows):
        for axis, unit in (("tokens", "tok"), ("latency", "s")):
            mine = [r for r in rows if r["task"] == task and r["axis"] == axis]
            if not mine:
                continue
            names = list(dict.fromkeys(k for r in mine for k in r if k not in ("task", "axis", "budget")))
            header = ["method"] + [f"≤ {_budget(r['budget'], unit)}" for r in mine]
            body = [[name] + [_pct(r.get(name)) for r in mine] for name in names]
            tables.append(
                (f"Best accuracy within a {axis} budget: {task} (see docs/evals.md)", (header, body))
            )
    return tables


def _budget(value: float, unit: str) -> str:
    return f"{value:.0f} tok" if unit == "tok" else f"{value:.2f} s"


def _pct(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.1%}"


def summary_lines(report: dict[str, Any]) -> list[str]:
    """A few lines per task: its settings, the most accurate, and the accuracy-per-token frontier."""
    rows = report["summary"]
    lines = []
    for task in dict.fromkeys(r["task"] for r in rows):
        mine = [r for r in rows if r["task"] == task]
        strategies = list(dict.fromkeys(r["strategy"] for r in mine))
        problems = max(r["num_problems"] for r in mine)
        lines.append(f"{task}: {len(mine)} settings of {len(strategies)} strategies "
                     f"({', '.join(strategies)}), up to {problems} problems")  # fmt: skip
        best = max(mine, key=lambda r: (r["accuracy"], -r["total_tokens"]))
        lines.append(f"  most accurate: {_setting(best)}")
        front = pareto_front([Point(_name(r), r["strategy"], float(r["total_tokens"]), r["accuracy"])
                              for r in mine if not math.isnan(float(r["total_tokens"]))])  # fmt: skip
        lines.append("  best for their tokens (Pareto): " + "; ".join(
            f"{p.label} {_pct(p.accuracy)} at {p.cost:.0f} tok" for p in front))  # fmt: skip
    if report["notes"]:
        lines.append(f"{len(report['notes'])} note(s) above the report (stderr)")
    return lines


def _name(row: dict[str, Any]) -> str:
    return f"{row['strategy']} n={row['n']}" + (f" @{row['folder']}" if row.get("folder") else "")


def _setting(row: dict[str, Any]) -> str:
    return (f"{_name(row)} {_pct(row['accuracy'])} (95% CI {_pct(row['ci_low'])}-{_pct(row['ci_high'])}), "
            f"{row['latency_mean']:.2f} s and {row['total_tokens']:.0f} tok per problem")  # fmt: skip


def print_terminal(report: dict[str, Any], sections: Sequence[tuple[str, Cells]], console: Console) -> None:
    """The summary, then each non-empty section (the budget section sideways)."""
    if report["summary"]:
        console.print("Summary", style="bold")
        for line in summary_lines(report):
            console.print(line, overflow="fold", highlight=False, markup=False)
        console.print()
    for title, (header, body) in sections:
        if not body:
            continue
        if title.startswith("Best accuracy within a budget"):
            for sub_title, cells in budget_sideways(report["within_budget"]):
                print_table(console, sub_title, cells)
        else:
            print_table(console, title, (header, body))
