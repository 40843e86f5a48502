"""`paragen tasks`: the built-in tasks, one line each (name, where its rows come from, bundled rows,
and the description cut to the terminal's width)."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import typer

from paragen.cli_options import fail
from paragen.errors import ParagenError

HEADER = ("task", "source (hub id@revision)", "rows", "description")
_FEWEST_DESCRIPTION = 20  # a narrower terminal wraps the line rather than cut a description to nothing


def task_cells(name: str) -> tuple[str, str, str, str]:
    """``(NAME, SOURCE, ROWS, DESCRIPTION)`` for one built-in task (no hub access)."""
    from evals.tasks import get_task

    task = get_task(name)
    source = f"hf:{task.hub.repo}" if task.hub is not None else "bundled"
    if task.hub is not None and task.hub.revision:
        source += f"@{task.hub.revision[:12]}"
    if task.generate is not None and task.hub is None:
        source = "generated"
    rows = _bundled_rows(task.bundled_path() if task.bundled else None)
    return name, source, rows, " ".join(task.description.split())


def task_lines(cells: Sequence[tuple[str, str, str, str]], width: int) -> list[str]:
    """The table, its columns as wide as their longest cell, each description cut with an ellipsis
    so that a line fits in ``width`` characters."""
    table = [HEADER, *cells]
    name_w, source_w, rows_w = (max(len(row[i]) for row in table) for i in range(3))
    room = max(width - (name_w + source_w + rows_w + 6), _FEWEST_DESCRIPTION)
    return [
        f"{name:<{name_w}}  {source:<{source_w}}  {rows:>{rows_w}}  {_fit(text, room)}".rstrip()
        for name, source, rows, text in table
    ]


def _fit(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, cut with an ellipsis."""
    return text if len(text) <= width else text[: max(width - 3, 0)] + "..."


def _bundled_rows(path: Path | None) -> str:
    """How many rows the bundled file has ('-' where the task bundles none)."""
    if path is None or not path.is_file():
        return "-"
    with path.open("rb") as handle:
        return str(sum(1 for line in handle if line.strip()))


def tasks_command() -> None:
    """List the built-in tasks for `paragen eval -t NAME`: name, source (hub id) and bundled rows."""
    from evals.tasks import task_names

    try:
        cells = [task_cells(name) for name in task_names()]
    except ParagenError as exc:
        fail(exc)
    for line in task_lines(cells, shutil.get_terminal_size().columns):
        typer.echo(line)
