"""The run's records: one JSONL line per finished (task, problem, strategy, n), written at once.

Every line is appended, flushed and fsynced as soon as its problem finishes, so a killed
run loses at most the problems in flight. A line cut short by the kill is dropped on the
next open (the file is truncated back to its last full line), and ``--resume`` skips every
key already recorded, so nothing is run twice and nothing is duplicated.

A record holds the problem, the strategy's result with its raw traces and accounting,
the grade, the strategy config, the run config (backend, sampling, seeds) and versions.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from paragen.errors import ConfigError

RECORDS_FILE = "records.jsonl"
RUN_FILE = "run.json"
SCHEMA = 1

Key = tuple[str, str, str, int]
"""(task, problem id, strategy, n): what a record is unique by."""


def record_key(record: dict[str, Any]) -> Key:
    return (str(record["task"]), str(record["problem"]["id"]), str(record["strategy"]), int(record["n"]))


def versions() -> dict[str, str]:
    """Versions of what decides the numbers: paragen, the grader and the data libraries."""
    found = {"python": platform.python_version()}
    for name in ("paragen", "math-verify", "datasets", "torch", "transformers", "sympy"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


@dataclass
class RecordWriter:
    """Appends records durably; knows which keys are already recorded (for resume)."""

    path: Path
    done: set[Key]

    @classmethod
    def open(cls, run_dir: Path, *, resume: bool) -> RecordWriter:
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / RECORDS_FILE
        if path.exists() and path.stat().st_size and not resume:
            raise ConfigError(
                f"{path} already has records", hint="pass --resume to continue it, or pick a new --out"
            )
        _drop_partial_line(path)
        return cls(path, {record_key(r) for r in read_records(run_dir)})

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        self.done.add(record_key(record))


def _drop_partial_line(path: Path) -> None:
    """Cut a last line left without its newline by a kill, so the next append starts clean."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with path.open("r+b") as handle:
            handle.truncate(data.rfind(b"\n") + 1)
            handle.flush()
            os.fsync(handle.fileno())


def iter_records(run_dir: Path) -> Iterator[dict[str, Any]]:
    """Every complete record of a run, in the order written (a torn last line is skipped)."""
    path = run_dir / RECORDS_FILE if run_dir.is_dir() else run_dir
    if not path.exists():
        return
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if not line.endswith("\n"):
                break
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def read_records(run_dir: Path) -> list[dict[str, Any]]:
    return list(iter_records(run_dir))


def write_run_info(run_dir: Path, info: dict[str, Any]) -> None:
    """The run's configuration beside its records (rewritten on resume with the same content)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    target = run_dir / RUN_FILE
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps({"schema": SCHEMA, **info}, indent=2, sort_keys=True), encoding="utf-8")
    os.replace(tmp, target)


def read_run_info(run_dir: Path) -> dict[str, Any]:
    target = run_dir / RUN_FILE
    if not target.exists():
        return {}
    info: dict[str, Any] = json.loads(target.read_text(encoding="utf-8"))
    return info
