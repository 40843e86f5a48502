"""Records: typed lines, durable appends, torn last lines dropped, bad lines named, resume keys."""

from __future__ import annotations

from pathlib import Path

import pytest
from evals_helpers import eval_record

from evals.run.records import RECORDS_FILE, RecordWriter, load_records, read_records
from paragen.errors import ConfigError


def test_append_then_reopen_knows_the_keys_with_results(tmp_path: Path) -> None:
    writer = RecordWriter.open(tmp_path)
    writer.append(eval_record("a"))
    writer.append(eval_record("a", n=4))
    writer.append(eval_record("b", outcome="error"))
    again = RecordWriter.open(tmp_path)
    # a backend error is not a result: the key stays open, so resume runs it again
    assert again.done == {("t", "a", "s", 1, "s0", -1), ("t", "a", "s", 4, "s0", -1)}


def test_the_last_record_of_a_key_counts(tmp_path: Path) -> None:
    writer = RecordWriter.open(tmp_path)
    writer.append(eval_record("a", outcome="error"))
    writer.append(eval_record("b"))
    writer.append(eval_record("a"))
    latest = load_records(tmp_path).latest()
    assert [(r.problem.id, r.grade.outcome) for r in latest] == [("b", "correct"), ("a", "correct")]


def test_a_torn_last_line_is_dropped_before_appending(tmp_path: Path) -> None:
    writer = RecordWriter.open(tmp_path)
    writer.append(eval_record("a"))
    with (tmp_path / RECORDS_FILE).open("a") as handle:
        handle.write('{"task": "t", "problem": {"id": "b"')  # what a SIGKILL mid-write leaves
    found = load_records(tmp_path)
    assert [r.problem.id for r in found.records] == ["a"] and found.torn_tail
    resumed = RecordWriter.open(tmp_path)
    resumed.append(eval_record("c"))
    assert [r.problem.id for r in read_records(tmp_path)] == ["a", "c"]


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("garbage", "line 2 is not JSON"),
        ("{}", r"line 2 is not a valid record: run_id: Field required \(and"),
        ('{"schema": 1, "task": "t"}', "line 2 is a schema 1 record"),
        ("[1, 2]", "line 2 is not a valid record"),
    ],
)
def test_a_bad_line_in_the_middle_is_named_not_skipped(tmp_path: Path, line: str, needle: str) -> None:
    good = eval_record("a").to_line()
    (tmp_path / RECORDS_FILE).write_text(good + line + "\n" + good)
    with pytest.raises(ConfigError, match=needle):
        load_records(tmp_path)
    with pytest.raises(ConfigError, match=needle):  # nor does a resume append after it
        RecordWriter.open(tmp_path)


def test_a_wrong_typed_field_is_named(tmp_path: Path) -> None:
    line = eval_record("a").to_line().replace('"n":1', '"n":"many"')
    (tmp_path / RECORDS_FILE).write_text(line)
    with pytest.raises(ConfigError, match="line 1 is not a valid record: n: Input should be a valid integer"):
        load_records(tmp_path)


def test_records_file_that_is_a_directory(tmp_path: Path) -> None:
    (tmp_path / RECORDS_FILE).mkdir()
    with pytest.raises(ConfigError, match="is not a file"):
        load_records(tmp_path)
