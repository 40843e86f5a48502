"""`paragen tasks`: the built-in tasks, one line each (name, where its rows come from, bundled rows)."""

from __future__ import annotations

from pathlib import Path

import typer

from paragen.cli_options import fail
from paragen.errors import ParagenError


def task_line(name: str) -> str:
    """``NAME  SOURCE  ROWS bundled rows  DESCRIPTION`` for one built-in task (no hub access)."""
    from evals.tasks import get_task

    task = get_task(name)
    source = f"hf:{task.hub.repo}" if task.hub is not None else "bundled"
    if task.hub is not None and task.hub.revision:
        source += f"@{task.hub.revision[:12]}"
    if task.generate is not None and task.hub is None:
        source = "generated"
    rows = _bundled_rows(task.bundled_path() if task.bundled else None)
    return f"{name:<22} {source:<44} {rows:>5}  {task.description}"


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
        typer.echo(f"{'task':<22} {'source (hub id@revision)':<44} {'rows':>5}  description")
        for name in task_names():
            typer.echo(task_line(name))
    except ParagenError as exc:
        fail(exc)
