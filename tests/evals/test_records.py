"""Records: durable appends, torn last lines dropped, resume keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evals.records import RECORDS_FILE, RecordWriter, read_records
from paragen.errors import ConfigError


def _rec(pid: str, n: int = 1) -> dict[str, Any]:
    return {"task": "t", "problem": {"id": pid}, "strategy": "s", "n": n}


def test_append_then_resume_knows_the_keys(tmp_path: Path) -> None:
    writer = RecordWriter.open(tmp_path, resume=False)
    writer.append(_rec("a"))
    writer.append(_rec("a", n=4))
    again = RecordWriter.open(tmp_path, resume=True)
    assert again.done == {("t", "a", "s", 1), ("t", "a", "s", 4)}
    with pytest.raises(ConfigError, match="--resume"):
        RecordWriter.open(tmp_path, resume=False)


def test_a_torn_last_line_is_dropped_before_appending(tmp_path: Path) -> None:
    writer = RecordWriter.open(tmp_path, resume=False)
    writer.append(_rec("a"))
    with (tmp_path / RECORDS_FILE).open("a") as handle:
        handle.write('{"task": "t", "problem": {"id": "b"')  # what a SIGKILL mid-write leaves
    assert [r["problem"]["id"] for r in read_records(tmp_path)] == ["a"]
    resumed = RecordWriter.open(tmp_path, resume=True)
    resumed.append(_rec("c"))
    assert [r["problem"]["id"] for r in read_records(tmp_path)] == ["a", "c"]
