"""Rows -> Problems, with the run's data source recorded and bad data refused in one line.

Rows are always a ``datasets.Dataset``: from the hub (``load_dataset(hub_id, config,
split=, revision=)``), from a bundled copy under ``evals/data`` or a user's file
(``load_dataset("json" | "csv" | "parquet", data_files=...)``), or generated
(``Dataset.from_list``). Which one is used, and why, is returned as a
:class:`~evals.run.records.DataSource` with the row count and sha256 hashes.

Source policy (``source``): ``"auto"`` tries the hub when it can be reached and falls
back to the bundled copy, saying what failed in ``DataSource.note``; ``"bundled"``
(``--offline``) never touches the hub; ``"hub"`` (``--hub``) fails if the hub cannot be
used. A task without a bundled copy (aime25) needs the hub and says so in one line.

User data is checked before anything runs: an empty or unreadable file, a missing field,
a row without a question or answer, an answer that is a list, or two rows with one id
end in a ConfigError naming the file and row, never in a graded run.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from evals.tasks.base import Fields, HubSource, Task
from evals.tasks.proof_rows import proof_meta
from paragen.errors import ConfigError
from paragen.types import Problem

if TYPE_CHECKING:
    from datasets import Dataset

SourceChoice = Literal["auto", "hub", "bundled"]


class DataSource(BaseModel):
    """Where a run's problems came from, precisely enough to get the same rows again (kept in run.json)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    kind: Literal["hub", "bundled", "file", "generated"]
    name: str  # hub id, bundled file name, file path, or the generator
    revision: str | None = None  # hub revision asked for (None: the hub's main)
    split: str | None = None
    file_sha256: str | None = None  # sha256 of the file's bytes (bundled and user files)
    rows_sha256: str  # sha256 of the rows as loaded (one canonical JSON line per row)
    rows: int
    note: str | None = None  # why this source and not another (e.g. the hub failed)

    def describe(self) -> str:
        where = f"{self.name}@{self.revision or 'main'}" if self.kind == "hub" else self.name
        digest = self.file_sha256 or self.rows_sha256
        return f"{self.kind} {where}, {self.rows} rows, sha256 {digest[:16]}"


_HUB_HOST = ("huggingface.co", 443)


@dataclass(frozen=True)
class LoadedRows:
    rows: Dataset
    fields: Fields
    source: DataSource


def hub_offline(timeout_s: float = 1.5) -> str | None:
    """Why the hub should be skipped (the HF offline switches, or no connection), or None."""
    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on"):
            return f"{var} is set"
    try:
        with socket.create_connection(_HUB_HOST, timeout=timeout_s):
            return None
    except OSError as exc:
        return f"no connection to huggingface.co ({exc.strerror or type(exc).__name__})"


def load_rows(task: Task, source: SourceChoice = "auto") -> LoadedRows:
    """The task's rows, their field mapping, and where they came from."""
    from datasets import Dataset

    if task.generate is not None:
        rows = Dataset.from_list(task.generate())
        return LoadedRows(rows, task.bundled_fields, _source(rows, "generated", task.description))
    if task.hub is None:
        return _from_file(task, note=None)
    skip = "--offline was given" if source == "bundled" else hub_offline()
    if skip is None:
        try:
            return _from_hub(task.hub)
        except ConfigError as failure:
            if source == "hub" or task.bundled is None:
                raise
            return _from_file(task, note=f"{failure.message}; used the bundled copy instead")
    if source == "hub":
        raise ConfigError(f"task {task.name!r}: --hub was given but the hub cannot be used: {skip}")
    if task.bundled is None:
        raise ConfigError(
            f"task {task.name!r} has no bundled copy ({task.note or 'hub only'}) "
            f"and needs the hub ({task.hub.repo}), which cannot be used: {skip}",
            hint="run with network access, or pass a local file as the task",
        )
    return _from_file(task, note=f"hub not used: {skip}")


def _from_hub(hub: HubSource) -> LoadedRows:
    from datasets import load_dataset

    where = f"{hub.repo}@{hub.revision or 'main'}"
    try:
        rows = load_dataset(hub.repo, hub.config, split=hub.split, revision=hub.revision)
    except Exception as exc:  # the hub library raises many types; the message is what matters
        raise ConfigError(f"loading {where} from the hub failed: {_brief(exc)}") from exc
    if hub.rows is not None and len(rows) != hub.rows:
        raise ConfigError(f"the hub's {where} split {hub.split!r} has {len(rows)} rows, expected {hub.rows}")
    source = _source(rows, "hub", hub.repo, revision=hub.revision, split=hub.split)
    return LoadedRows(rows, hub.fields, source)


def _from_file(task: Task, *, note: str | None) -> LoadedRows:
    assert task.bundled is not None
    path = task.bundled_path()
    rows = read_file(path, task.file_format)
    kind = "file" if Path(task.bundled).is_absolute() else "bundled"
    name = str(path) if kind == "file" else path.name
    source = _source(rows, kind, name, file_sha256=_file_sha256(path), note=note)
    return LoadedRows(rows, task.bundled_fields, source)


def read_file(path: Path, file_format: str) -> Dataset:
    """A local file as a Dataset; an empty, malformed or unreadable file is one ConfigError line."""
    import datasets

    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ConfigError(f"cannot read task file {path}: {exc.strerror or exc}") from None
    if size == 0:
        raise ConfigError(f"task file {path} is empty")
    if file_format == "json":
        _check_json(path)
    elif file_format == "csv":
        _check_csv(path)
    was_off = datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()  # a local file loads in a blink; its bar would only clutter stderr
    # datasets also logs a file it cannot parse before raising; the ConfigError below is the one line.
    log = logging.getLogger("datasets")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        return datasets.load_dataset(file_format, data_files=str(path), split="train")
    except Exception as exc:  # pyarrow / datasets errors for files they cannot parse
        raise ConfigError(f"cannot read task file {path} as {file_format}: {_brief(exc)}") from exc
    finally:
        log.setLevel(level)
        if not was_off:
            datasets.enable_progress_bars()


def _check_json(path: Path) -> None:
    text = _text(path)
    if not text.strip():
        raise ConfigError(f"task file {path} is empty")
    if path.suffix.lower() == ".json" and text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"task file {path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
        if not rows or not all(isinstance(r, dict) for r in rows):
            raise ConfigError(f"task file {path} must be a non-empty list of JSON objects")
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"task file {path} line {number} is not valid JSON: {exc.msg}") from None
        if not isinstance(row, dict):
            raise ConfigError(f"task file {path} line {number} is not a JSON object")


def _check_csv(path: Path) -> None:
    reader = csv.reader(io.StringIO(_text(path), newline=""))  # quoted fields may hold newlines
    header = next(reader, None)
    if not header:
        raise ConfigError(f"task file {path} is empty")
    for row in reader:
        if row and len(row) != len(header):
            raise ConfigError(
                f"task file {path} line {reader.line_num} has {len(row)} fields, the header has {len(header)}"
            )


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"task file {path} is not UTF-8 text") from None


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _source(rows: Dataset, kind: Any, name: str, **extra: Any) -> DataSource:
    digest = hashlib.sha256()
    for row in rows:
        digest.update(json.dumps(row, sort_keys=True, default=str, ensure_ascii=False).encode() + b"\n")
    return DataSource(kind=kind, name=name, rows_sha256=digest.hexdigest(), rows=len(rows), **extra)


def _brief(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


def to_problems(task: Task, loaded: LoadedRows) -> list[Problem]:
    """Every row as a Problem; refuses missing fields, rows without question or answer, and duplicate ids."""
    fields, where = loaded.fields, loaded.source.name
    columns = set(loaded.rows.column_names)
    for role, name in (("question", fields.question), ("answer", fields.answer), ("id", fields.id)):
        if name is not None and name not in columns:
            raise ConfigError(
                f"{where} has no {role} field {name!r}",
                hint=f"its fields are {', '.join(sorted(columns))}; pass --{role}-field",
            )
    problems: list[Problem] = []
    first_row: dict[str, int] = {}
    for index, row in enumerate(loaded.rows):
        problem = _problem(task, dict(row), fields, index, where)
        if problem.id in first_row:
            rows = f"rows {first_row[problem.id]} and {index}"
            raise ConfigError(
                f"{where}: problem id {problem.id!r} appears twice ({rows})",
                hint="ids must be unique; pick another --id-field or leave it out to number the rows",
            )
        first_row[problem.id] = index
        problems.append(problem)
    return problems


def _problem(task: Task, row: dict[str, Any], fields: Fields, index: int, where: str) -> Problem:
    question = row.get(fields.question)
    if not isinstance(question, str) or not question.strip():
        raise ConfigError(f"{where}: row {index} has no text in field {fields.question!r}")
    gold = None
    if fields.answer is not None:
        gold = _gold(row.get(fields.answer), f"{where}: row {index} field {fields.answer!r}")
        gold = gold if fields.gold is None else fields.gold(gold)
    if fields.id is None:
        pid = f"{task.name}-{index}"
    else:
        pid = _scalar_text(row.get(fields.id), f"{where}: row {index} field {fields.id!r}", "id")
    meta = {k: v for k, v in row.items() if k in ("level", "subject", "type") and v is not None}
    if task.proof:  # the judges read these from the record, so a re-grade needs nothing else
        meta.update(proof_meta(row, fields, f"{where}: row {index}"))
    return Problem(id=pid, question=question, gold=gold, meta={"task": task.name, **meta})


def _gold(value: Any, where: str) -> str:
    """A gold answer as text. A list is refused: one problem grades against one answer."""
    if isinstance(value, list | tuple | dict):
        raise ConfigError(
            f"{where} holds a {type(value).__name__} ({json.dumps(value, default=str)[:60]})",
            hint="give each problem one answer as a string or number",
        )
    return _scalar_text(value, where, "answer")


def _scalar_text(value: Any, where: str, what: str) -> str:
    if value is None or (isinstance(value, float) and value != value):
        raise ConfigError(f"{where} has no {what}")
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(f"{where} holds a {type(value).__name__}, not a {what}")
    text = str(value).strip()
    if not text:
        raise ConfigError(f"{where} has no {what}")
    return text


@dataclass(frozen=True)
class Selection:
    """Which rows to run: shuffle (seeded), pick ids, then offset and limit."""

    limit: int | None = None
    offset: int = 0
    ids: Sequence[str] = ()
    shuffle: bool = False
    seed: int = 0


@dataclass(frozen=True)
class LoadedTask:
    """The problems chosen for a run and the data source they came from (the whole of it)."""

    problems: list[Problem]
    source: DataSource


def load_task(task: Task, selection: Selection | None = None, *, source: SourceChoice = "auto") -> LoadedTask:
    """The task's problems after ``selection``; one ConfigError line when nothing fits."""
    selection = selection or Selection()
    loaded = load_rows(task, source)
    rows = loaded.rows.shuffle(seed=selection.seed) if selection.shuffle else loaded.rows
    problems = to_problems(task, LoadedRows(rows, loaded.fields, loaded.source))
    if selection.ids:
        wanted = set(selection.ids)
        problems = [p for p in problems if p.id in wanted]
        missing = wanted - {p.id for p in problems}
        if missing:
            raise ConfigError(f"task {task.name!r} has no problem with id {sorted(missing)[0]!r}")
    end = None if selection.limit is None else selection.offset + selection.limit
    chosen = problems[selection.offset : end]
    if not chosen:
        raise ConfigError(f"task {task.name!r}: the selection is empty", hint="check --offset/--limit/--ids")
    return LoadedTask(chosen, loaded.source)


def load_problems(
    task: Task, selection: Selection | None = None, *, offline: bool | None = None
) -> list[Problem]:
    """The problems of :func:`load_task` (``offline=True``: bundled copies only)."""
    return load_task(task, selection, source="bundled" if offline else "auto").problems
