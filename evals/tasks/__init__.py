"""The task registry: built-in benchmarks by name, and users' own data as tasks.

``get_task("gsm8k")`` gives a built-in; ``get_task("path/to/file.jsonl")`` (or .csv,
.parquet) and ``get_task("hf:owner/name")`` build a task from the user's data with a
field mapping (``question=``, ``answer=``, ``id=``) and a grading mode.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from evals.tasks.base import DATA_DIR, Fields, HubSource, Task
from evals.tasks.loading import LoadedTask, Selection, hub_offline, load_problems, load_rows, load_task
from evals.tasks.tools import TOOL_TASKS, tool_task
from paragen.answers import ExtractMode
from paragen.errors import ConfigError

BUILTIN = (
    "arith", "gsm8k", "math500", "aime24", "aime25", "aime26", "hmmt_feb25", "brumo25", "amc23",
    "proofs_mini", "imo_proofbench", "usamo26",
)  # fmt: skip
_FORMATS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
_MODES: tuple[ExtractMode, ...] = ("auto", "boxed", "answer_is", "last_number")


def task_names() -> list[str]:
    return [*BUILTIN, *TOOL_TASKS]


def get_task(
    spec: str,
    *,
    question: str | None = None,
    answer: str | None = None,
    id_field: str | None = None,
    grading: str | None = None,
    split: str = "train",
    config: str | None = None,
    revision: str | None = None,
) -> Task:
    """A built-in task by name, or a user task from a local file or ``hf:owner/name``."""
    if spec in BUILTIN:
        task: Task = importlib.import_module(f"evals.tasks.{spec}").TASK
        return task if grading is None else _replace_grading(task, grading)
    if spec in TOOL_TASKS:  # the tool-use benchmarks, their rows read only when asked for
        return tool_task(spec)
    fields = Fields(question or "problem", answer or "answer", id_field)
    mode = _mode(grading or "auto")
    if spec.startswith("hf:"):
        repo = spec[3:]
        hub = HubSource(repo, split=split, config=config, revision=revision, fields=fields)
        return Task(name=repo, description=f"hub dataset {repo}", hub=hub, grading=mode)
    path = Path(spec)
    if path.suffix.lower() in _FORMATS:
        if not path.is_file():
            raise ConfigError(f"task file {spec!r} does not exist")
        return Task(
            name=path.stem,
            description=f"local file {path}",
            bundled=str(path.resolve()),
            bundled_fields=fields,
            grading=mode,
            file_format=_FORMATS[path.suffix.lower()],
        )
    raise ConfigError(
        f"unknown task {spec!r}",
        hint=f"use one of {', '.join(task_names())}, a .jsonl/.csv/.parquet file, or hf:OWNER/NAME",
    )


def at_revision(task: Task, revision: str) -> Task:
    """``task`` read from the hub at ``revision`` (a commit, branch or tag) in place of its pin.

    Only a task with a hub source has revisions: a local file, a generated task or a tool task
    is refused in one line, as is an empty revision or one with spaces. A bundled copy holds the
    pinned revision's rows, not these, so the task loses it: the hub's copy at ``revision`` or
    nothing.
    """
    from dataclasses import replace

    if not revision.strip() or any(ch.isspace() for ch in revision):
        raise ConfigError(f"bad --revision {revision!r}", hint="give a commit hash, branch or tag")
    if task.hub is None:
        raise ConfigError(
            f"--revision applies to tasks read from the hub; {task.name!r} is not ({task.description})",
            hint="drop --revision, or use a hub task (hf:OWNER/NAME or a built-in with a hub source)",
        )
    note = f"--revision {revision}: only the hub holds that revision" if task.bundled else task.note
    return replace(task, hub=replace(task.hub, revision=revision), bundled=None, note=note)


def _mode(grading: str) -> ExtractMode:
    for mode in _MODES:
        if grading == mode:
            return mode
    raise ConfigError(f"unknown grading mode {grading!r}", hint=f"use one of {', '.join(_MODES)}")


def _replace_grading(task: Task, grading: str) -> Task:
    from dataclasses import replace

    return replace(task, grading=_mode(grading))


__all__ = [
    "BUILTIN",
    "DATA_DIR",
    "Fields",
    "HubSource",
    "LoadedTask",
    "Selection",
    "Task",
    "at_revision",
    "get_task",
    "hub_offline",
    "load_problems",
    "load_rows",
    "load_task",
    "task_names",
]
