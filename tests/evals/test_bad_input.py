"""Bad input to `eval` and `report`: exit 2, one stderr line naming it, no traceback, nothing half-written."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import datasets
import pytest
from typer.testing import CliRunner, Result

from evals.cli import app
from evals.run.records import RECORDS_FILE, RUN_FILE

runner = CliRunner()
ROW = {"problem": "What is 2 + 2?", "answer": "4", "id": "a"}
BASE = ["--backend", "scripted", "-s", "single", "--no-progress", "--no-plot"]


def _lines(*rows: object) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _cut_parquet(path: Path) -> None:
    datasets.Dataset.from_list([ROW]).to_parquet(str(path))
    path.write_bytes(path.read_bytes()[:40])


# (task file name, its content or a writer, extra eval arguments, what the one line must say)
BAD_DATA: list[tuple[str, str | Callable[[Path], None], list[str], str]] = [
    ("empty.jsonl", "", [], "is empty"),
    ("malformed.jsonl", _lines(ROW) + "{not json\n", [], "line 2 is not valid JSON"),
    ("corrupt.parquet", _cut_parquet, [], "cannot read task file"),
    ("rows.jsonl", _lines(ROW), ["--answer-field", "answr"], "no answer field 'answr'"),
    ("rows.jsonl", _lines(ROW), ["--id-field", "nope"], "no id field 'nope'"),
    ("ragged.csv", "problem,answer\nWhat is 1 + 1?,2\nWhat is 2 + 2?\n", [], "line 3 has 1 fields"),
    ("lists.jsonl", _lines({**ROW, "answer": [4, 5]}), [], "holds a list ([4, 5])"),
    ("dupes.jsonl", _lines(ROW, ROW), ["--id-field", "id"], "problem id 'a' appears twice"),
]


def _assert_one_line_exit_2(result: Result, needle: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.stderr, result.stdout)
    assert needle in result.stderr and result.stderr.strip().count("\n") == 0, result.stderr
    assert "Traceback" not in result.stderr and isinstance(result.exception, SystemExit)


@pytest.mark.parametrize(("name", "content", "extra", "needle"), BAD_DATA)
def test_bad_user_data(
    tmp_path: Path, name: str, content: str | Callable[[Path], None], extra: list[str], needle: str
) -> None:
    path = tmp_path / name
    content(path) if callable(content) else path.write_text(content)
    out = tmp_path / "out"
    result = runner.invoke(app, ["eval", "-t", str(path), *extra, *BASE, "--out", str(out)])
    _assert_one_line_exit_2(result, needle)
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["-t", "arith", "--offline", "--hub"], "contradict"),
        (["-t", "aime25", "--offline"], "aime25' has no bundled copy"),
        (["-t", "math500", "--hub"], "--hub was given but the hub cannot be used"),
    ],
)
def test_bad_data_source_flags(tmp_path: Path, args: list[str], needle: str) -> None:
    result = runner.invoke(app, ["eval", *args, *BASE, "--out", str(tmp_path / "out")])
    _assert_one_line_exit_2(result, needle)
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("recorded") / "run"
    args = ["eval", "-t", "arith", "--limit", "3", "--sample-seed", "1", *BASE, "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize(
    ("changed", "needle"),
    [
        (["--temperature", "0.2"], "other settings (sampling: {max_tokens=512, temperature=0.7"),
        (["--max-tokens", "64"], "other settings (sampling:"),
        (["--backend", "scripted:"], "other settings (backend: scripted -> scripted:"),
        (["--deadline-s", "30"], "other settings (budget:"),
        (["--grading", "boxed"], "other settings (grading_mode: auto -> boxed)"),
    ],
)
def test_resume_with_other_settings_is_refused(
    recorded: Path, tmp_path: Path, changed: list[str], needle: str
) -> None:
    run = tmp_path / "copy"
    shutil.copytree(recorded, run)
    if "scripted:" in changed:
        script = tmp_path / "s.jsonl"
        script.write_text(json.dumps({"text": "\\boxed{1}"}) + "\n")
        changed = ["--backend", f"scripted:{script}"]
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    args = ["eval", "-t", "arith", "--limit", "3", "--sample-seed", "1", *BASE, *changed, "--resume"]
    result = runner.invoke(app, [*args, "--out", str(run)])
    _assert_one_line_exit_2(result, needle)
    assert "--new-run" in result.stderr
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before  # nothing rewritten


def _record_line(recorded: Path) -> str:
    return (recorded / RECORDS_FILE).read_text().splitlines()[0]


REPORT_CASES: list[tuple[str, Callable[[Path, str], object], str]] = [
    ("empty object", lambda p, good: p.write_text("{}\n"),
     "line 1 is not a valid record: run_id: Field required"),
    ("wrong type", lambda p, good: p.write_text(good.replace('"n":1', '"n":"one"') + "\n"),
     "line 1 is not a valid record: n: Input should be a valid integer"),
    ("garbage mid", lambda p, good: p.write_text(good + "\nnot json\n" + good + "\n"), "line 2 is not JSON"),
    ("empty file", lambda p, good: p.write_text(""), "holds no complete record"),
    ("a directory", lambda p, good: p.mkdir(), "is not a file"),
    ("old schema", lambda p, good: p.write_text(good.replace('"schema":2', '"schema":1') + "\n"),
     "is a schema 1 record"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "write", "needle"), REPORT_CASES, ids=[c[0] for c in REPORT_CASES])
def test_report_on_bad_records(
    recorded: Path, tmp_path: Path, case: str, write: Callable[[Path, str], object], needle: str
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(recorded / RUN_FILE, run / RUN_FILE)
    write(run / RECORDS_FILE, _record_line(recorded))
    result = runner.invoke(app, ["report", str(run)])
    _assert_one_line_exit_2(result, needle)
