"""A problem whose run raised is recorded as "failed" and the sweep goes on.

A strategy bug does not end `paragen eval` with a traceback and the other problems unrecorded:
every problem has its record, the failed ones keep the exception's type, message and
traceback, the exit code is 3, `--fail-fast` stops after recording the first failure, `--resume`
runs the failed ones again, and `paragen report` leaves them out of its tables and says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from evals_helpers import BUGGY_IDS, register_test_strategies
from typer.testing import CliRunner, Result

from evals.cli import app
from evals.cli.eval import EXIT_FAILED
from evals.run.records import load_records, read_records

runner = CliRunner()
BUGGY = ["arith-0-0001", "arith-0-0003"]


@pytest.fixture(autouse=True)
def buggy_problems() -> Iterator[None]:
    register_test_strategies()
    BUGGY_IDS.update(BUGGY)
    yield
    BUGGY_IDS.clear()


def eval_cli(out: Path, *extra: str) -> Result:
    args = ["eval", "-t", "arith", "-s", "t_buggy,t_single", "-b", "scripted", "--limit", "5"]
    return runner.invoke(app, [*args, "-o", str(out), "--no-progress", "--no-plot", *extra])


def test_a_failed_problem_is_recorded_and_the_sweep_goes_on(tmp_path: Path) -> None:
    result = eval_cli(tmp_path / "r")
    assert result.exit_code == EXIT_FAILED, result.output
    records = load_records(tmp_path / "r").latest()
    assert len(records) == 10  # every problem of both strategies, the buggy ones included
    failed = {r.problem.id: r for r in records if r.grade.outcome == "failed"}
    assert sorted(failed) == BUGGY and all(r.strategy == "t_buggy" for r in failed.values())
    failure = failed[BUGGY[0]].failure
    assert failure is not None and failure.type == "builtins.ZeroDivisionError"
    assert failure.message == f"a bug on {BUGGY[0]}"
    assert "raise ZeroDivisionError" in failure.traceback and "ExceptionGroup" not in failure.traceback
    assert failed[BUGGY[0]].result.answer is None and not failed[BUGGY[0]].grade.correct
    assert "2 of 10 records are not results: 2 failed" in result.output
    assert "2 of 10 problems failed" in result.output  # the report's note; its tables go on


def test_report_copes_with_failed_records(tmp_path: Path) -> None:
    eval_cli(tmp_path / "r")
    result = runner.invoke(app, ["report", str(tmp_path / "r"), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert "2 of 10 problems failed" in result.output
    rows = {row["strategy"]: row for row in json.loads(result.stdout)["summary"]}
    assert rows["t_buggy"]["num_problems"] == 3 and rows["t_single"]["num_problems"] == 5


def test_fail_fast_stops_at_the_first_failure_once_recorded(tmp_path: Path) -> None:
    result = eval_cli(tmp_path / "r", "--fail-fast", "--max-concurrent", "1")
    assert result.exit_code == EXIT_FAILED, result.output
    records = read_records(tmp_path / "r")
    assert [r.grade.outcome for r in records][-1] == "failed"
    assert records[-1].problem.id == BUGGY[0] and len(records) == 2  # t_single never started
    assert {r.strategy for r in records} == {"t_buggy"}


def test_resume_runs_failed_problems_again(tmp_path: Path) -> None:
    eval_cli(tmp_path / "r")
    BUGGY_IDS.clear()  # the strategy no longer raises on them
    result = eval_cli(tmp_path / "r", "--resume")
    assert result.exit_code == 0, result.output
    found = load_records(tmp_path / "r")
    assert len(found.records) == 12  # the two failed problems ran again, nothing else did
    assert all(r.grade.outcome != "failed" for r in found.latest())
