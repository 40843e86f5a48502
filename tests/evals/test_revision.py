"""`paragen eval --revision REV`: a task read from the hub is asked for at REV in place of its pin
(hf: tasks, built-ins, a preset's), run.json's data records it, and every bad combination ends in
one line with exit 2. The hub is a local folder in the hub layout read by the same loader."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import datasets
import pytest
from typer.testing import CliRunner, Result

from evals.cli import app
from evals.run.records import RUN_FILE
from evals.tasks import get_task

runner = CliRunner()
LOCAL_HUB = Path(__file__).resolve().parent / "data" / "matharena" / "brumo_2025"
FIELDS = ["--question-field", "problem", "--answer-field", "answer", "--id-field", "problem_idx"]
QUIET = ["--backend", "scripted", "-s", "single", "--limit", "1", "--no-progress", "--no-plot"]
REV = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hub_asked(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The hub counts as reachable; every revision the loader asks `load_dataset` for, in order."""
    asked: list[Any] = []
    real = datasets.load_dataset

    def spy(*args: Any, **kwargs: Any) -> Any:
        asked.append(kwargs.get("revision"))
        return real(*args, **kwargs)

    monkeypatch.setattr("evals.tasks.loading.hub_offline", lambda: None)
    monkeypatch.setattr(datasets, "load_dataset", spy)
    return asked


def _data(out: Path) -> dict[str, Any]:
    info: dict[str, Any] = json.loads((out / RUN_FILE).read_text())
    return info


def _ok(result: Result) -> None:
    assert result.exit_code == 0, (result.exit_code, result.output)


def test_an_hf_task_is_read_at_the_revision_and_run_json_records_it(
    hub_asked: list[Any], tmp_path: Path
) -> None:
    out = tmp_path / "r"
    task = ["-t", f"hf:{LOCAL_HUB}", *FIELDS]
    _ok(runner.invoke(app, ["eval", *task, "--revision", REV, *QUIET, "--out", str(out)]))
    assert hub_asked == [REV]
    data = _data(out)["data"]
    assert (data["kind"], data["name"], data["revision"]) == ("hub", str(LOCAL_HUB), REV)
    plain = tmp_path / "plain"  # the same task without the flag: the hub's main, recorded as such
    _ok(runner.invoke(app, ["eval", *task, *QUIET, "--out", str(plain)]))
    assert hub_asked == [REV, None] and _data(plain)["data"]["revision"] is None


def test_a_built_in_task_is_read_at_the_revision_in_place_of_its_pin(
    hub_asked: list[Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pinned = get_task("brumo25")
    assert pinned.hub is not None and pinned.hub.revision not in (None, REV)
    local = replace(pinned, hub=replace(pinned.hub, repo=str(LOCAL_HUB), rows=3))
    monkeypatch.setattr("evals.tasks.brumo25.TASK", local)
    out = tmp_path / "r"
    _ok(runner.invoke(app, ["eval", "-t", "brumo25", "--revision", REV, *QUIET, "--out", str(out)]))
    assert hub_asked == [REV]
    assert _data(out)["data"]["revision"] == REV


def _preset_file(tmp_path: Path, revision: str) -> Path:
    """A preset of an hf: task that pins a revision (the shipped ones read built-ins or main)."""
    path = tmp_path / "pinned.toml"
    path.write_text(
        "\n".join([
            "# Not reproduced with paragen: a test preset.",
            'paper = "a test"', 'model = "m"', f'task = "hf:{LOCAL_HUB}"', 'prompt = "paragen"',
            f'revision = "{revision}"', "temperature = 0.0", "top_p = 1.0", "max_tokens = 8",
            'strategies = ["single"]', "reproduced = false",
            'task_fields = { question = "problem", answer = "answer", id = "problem_idx" }',
            "[[published]]", 'metric = "accuracy"', 'strategy = "single"', "value = 50",
            'source = "none"',
        ])
    )  # fmt: skip
    return path


def test_a_presets_revision_is_used_and_the_flag_overrides_it(hub_asked: list[Any], tmp_path: Path) -> None:
    preset = str(_preset_file(tmp_path, "feedbeef" * 5))
    _ok(runner.invoke(app, ["eval", "--preset", preset, *QUIET, "--out", str(tmp_path / "a")]))
    first = _data(tmp_path / "a")
    assert first["data"]["revision"] == "feedbeef" * 5 and "revision" not in first["preset"]["overridden"]
    args = ["eval", "--preset", preset, "--revision", REV, *QUIET, "--out", str(tmp_path / "b")]
    _ok(runner.invoke(app, args))
    second = _data(tmp_path / "b")
    assert second["data"]["revision"] == REV and "revision" in second["preset"]["overridden"]
    assert hub_asked == ["feedbeef" * 5, REV]


def _one_line_exit_2(result: Result, needle: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert needle in result.stderr and result.stderr.strip().count("\n") == 0, result.stderr
    assert "Traceback" not in result.stderr and isinstance(result.exception, SystemExit)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["-t", "arith", "--revision", REV], "--revision applies to tasks read from the hub; 'arith'"),
        (["-t", "game24", "--revision", REV], "'game24' is not"),
        (["-t", "aime24", "--revision", REV, "--offline"], "--revision and --offline contradict"),
        (["-t", "aime24", "--revision", ""], "bad --revision ''"),
        (["-t", "aime24", "--revision", "a b"], "bad --revision 'a b'"),
        # A bundled copy holds the pinned rows, not REV's: with the hub away nothing is read.
        (["-t", "aime24", "--revision", REV], "only the hub holds that revision"),
    ],
)
def test_bad_combinations_are_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    out = tmp_path / "out"
    _one_line_exit_2(runner.invoke(app, ["eval", *args, *QUIET, "--out", str(out)]), needle)
    assert not out.exists()


def test_a_local_file_task_takes_no_revision(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"problem": "1 + 1?", "answer": "2"}) + "\n")
    args = ["eval", "-t", str(rows), "--revision", REV, *QUIET, "--out", str(tmp_path / "o")]
    _one_line_exit_2(runner.invoke(app, args), "'rows' is not (local file")
