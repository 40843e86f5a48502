"""Where a run's rows come from is recorded, hub failures are said, and bad user data is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import datasets
import pytest

from evals.tasks import get_task, load_rows, load_task
from paragen.errors import ConfigError


def _hub_reachable_but_failing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe says the hub is there; the download itself fails (fault injection)."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        if args and args[0] in ("json", "csv", "parquet"):
            return real(*args, **kwargs)
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)")

    real = datasets.load_dataset
    monkeypatch.setattr("evals.tasks.loading.hub_offline", lambda: None)
    monkeypatch.setattr(datasets, "load_dataset", refuse)


def test_a_failing_hub_is_said_and_the_bundled_copy_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    _hub_reachable_but_failing(monkeypatch)
    loaded = load_rows(get_task("gsm8k"), "auto")
    source = loaded.source
    assert source.kind == "bundled" and source.name == "gsm8k_test.jsonl" and source.rows == 1219
    assert source.note is not None and "openai/gsm8k@cc7b047b" in source.note
    assert "ConnectionError" in source.note and "bundled copy" in source.note


def test_asking_for_the_hub_fails_instead_of_falling_back(monkeypatch: pytest.MonkeyPatch) -> None:
    _hub_reachable_but_failing(monkeypatch)
    with pytest.raises(ConfigError, match="from the hub failed: ConnectionError"):
        load_rows(get_task("gsm8k"), "hub")


def test_hub_asked_for_while_offline_fails_in_one_line() -> None:
    with pytest.raises(ConfigError, match="--hub was given but the hub cannot be used: HF_"):
        load_rows(get_task("math500"), "hub")


def test_a_hub_split_of_the_wrong_size_is_a_failed_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("evals.tasks.loading.hub_offline", lambda: None)
    short = datasets.Dataset.from_list([{"problem": "1+1?", "answer": "2", "unique_id": "a"}])
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: short)
    with pytest.raises(ConfigError, match="has 1 rows, expected 500"):
        load_rows(get_task("math500"), "hub")


def test_generated_rows_are_hashed_reproducibly() -> None:
    one, two = load_rows(get_task("arith")), load_rows(get_task("arith"))
    assert one.source.kind == "generated" and one.source.rows == 200
    assert one.source.rows_sha256 == two.source.rows_sha256 and one.source.file_sha256 is None


def test_a_user_file_records_its_path_and_sha256(tmp_path: Path) -> None:
    import hashlib

    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps({"problem": "What is 1 + 1?", "answer": 2}) + "\n")
    loaded = load_task(get_task(str(path)))
    assert loaded.source.kind == "file" and loaded.source.name == str(path)
    assert loaded.source.file_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert loaded.problems[0].gold == "2"  # a number answer is its text


def _parquet(path: Path) -> None:
    datasets.Dataset.from_list([{"problem": "q", "answer": "1"}]).to_parquet(str(path))
    path.write_bytes(path.read_bytes()[:40])  # cut: not a parquet file any more


ROW = {"problem": "What is 2 + 2?", "answer": "4", "id": "a"}

# (file name, how to write it, extra get_task arguments, what the one error line must say)
BAD_FILES: list[tuple[str, Any, dict[str, str], str]] = [
    ("empty.jsonl", "", {}, "is empty"),
    ("blank.jsonl", "\n\n", {}, "is empty"),
    ("empty.csv", "", {}, "is empty"),
    ("mid.jsonl", json.dumps(ROW) + "\n{oops\n" + json.dumps(ROW) + "\n", {}, "line 2 is not valid JSON"),
    ("list.jsonl", "[1, 2]\n", {}, "line 1 is not a JSON object"),
    ("broken.json", "[{\"problem\": ", {}, "is not valid JSON"),
    ("cut.parquet", _parquet, {}, "cannot read task file"),
    ("ragged.csv", "problem,answer\nWhat is 1 + 1?,2\nWhat is 2 + 2?\n", {}, "line 3 has 1 fields"),
    ("extra.csv", "problem,answer\nWhat is 1 + 1?,2,7\n", {}, "line 2 has 3 fields"),
    ("rows.jsonl", json.dumps(ROW) + "\n", {"answer": "answr"}, "no answer field 'answr'"),
    ("rows.jsonl", json.dumps(ROW) + "\n", {"id_field": "nope"}, "no id field 'nope'"),
    ("rows.jsonl", json.dumps(ROW) + "\n", {"question": "q"}, "no question field 'q'"),
    ("holes.jsonl", json.dumps(ROW) + "\n" + json.dumps({**ROW, "answer": None, "id": "b"}) + "\n", {},
     "row 1 field 'answer' has no answer"),
    ("blank_answer.jsonl", json.dumps({**ROW, "answer": "  "}) + "\n", {}, "has no answer"),
    ("lists.jsonl", json.dumps({**ROW, "answer": [4, 5]}) + "\n", {}, "holds a list ([4, 5])"),
    ("dupes.jsonl", json.dumps(ROW) + "\n" + json.dumps(ROW) + "\n", {"id_field": "id"},
     "id 'a' appears twice (rows 0 and 1)"),
    ("dupes.csv", "problem,answer,key\nWhat?,1,k\nWhy?,2,k\n", {"id_field": "key"}, "id 'k' appears twice"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "content", "extra", "needle"), BAD_FILES)
def test_bad_user_data_is_refused_in_one_line(
    tmp_path: Path, name: str, content: Any, extra: dict[str, str], needle: str
) -> None:
    path = tmp_path / name
    content(path) if callable(content) else path.write_text(content)
    with pytest.raises(ConfigError) as info:
        load_task(get_task(str(path), **extra))
    line = info.value.one_line()
    assert needle in line and "\n" not in line, line


def test_a_quoted_csv_field_may_hold_a_newline(tmp_path: Path) -> None:
    path = tmp_path / "multi.csv"
    path.write_text('problem,answer\n"Line one.\nWhat is 1 + 1?",2\nWhat is 2 + 2?,4\n')
    problems = load_task(get_task(str(path))).problems
    assert [p.gold for p in problems] == ["2", "4"] and "\n" in problems[0].question


def test_report_prints_each_runs_data_source_and_hash(tmp_path: Path) -> None:
    import hashlib

    from typer.testing import CliRunner

    from evals.cli import app

    path = tmp_path / "mine.jsonl"
    path.write_text(
        "".join(json.dumps({"problem": f"What is {i} + 1?", "answer": i + 1}) + "\n" for i in range(2))
    )
    out = tmp_path / "run"
    cli = CliRunner()
    args = ["eval", "-t", str(path), "-s", "single", "--backend", "scripted", "--no-progress", "--no-plot"]
    assert cli.invoke(app, [*args, "--out", str(out)]).exit_code == 0
    shown = cli.invoke(app, ["report", str(out)], env={"COLUMNS": "400"}).stdout
    assert hashlib.sha256(path.read_bytes()).hexdigest() in shown and "2 rows" in shown
