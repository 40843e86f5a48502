"""A run folder interrupted before its end is marked partial (run.json and the report's header);
a completed run is not, and a resume that completes it clears the mark. Real subprocesses, real signals
(SIGINT unwinds through the same cancellation as SIGTERM, see paragen.signals)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evals.cli import app
from evals.run.records import RECORDS_FILE

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = 8
runner = CliRunner()


def _slow_script(tmp_path: Path) -> Path:
    """One script for every sample: 12 tokens 0.04 s apart, so a problem takes about half a second."""
    path = tmp_path / "slow.jsonl"
    words = " ".join(["step"] * 11)
    path.write_text(json.dumps({"text": f"{words} \\boxed{{3}}", "token_delay": 0.04}) + "\n")
    return path


def _command(out: Path, script: Path, *extra: str) -> list[str]:
    return [
        sys.executable, str(ROOT / "tests/evals/run_cli.py"), "eval", "-t", "arith", "-s", "t_single",
        "--backend", f"scripted:{script}", "--limit", str(PROBLEMS), "--max-concurrent", "1",
        "--no-progress", "--no-plot", "--out", str(out), *extra,
    ]  # fmt: skip


def _env() -> dict[str, str]:
    return {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


def _records(out: Path) -> int:
    path = out / RECORDS_FILE
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _partial(out: Path) -> bool:
    value = json.loads((out / "run.json").read_text())["partial"]
    assert isinstance(value, bool)
    return value


def _interrupt(out: Path, script: Path, sig: signal.Signals) -> int:
    proc = subprocess.Popen(
        _command(out, script), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 60
    while _records(out) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(sig)
    code = proc.wait(timeout=60)
    assert 2 <= _records(out) < PROBLEMS, f"the signal landed after {_records(out)} records"
    return code


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_an_interrupted_run_is_partial_until_a_resume_completes_it(
    sig: signal.Signals, tmp_path: Path
) -> None:
    out, script = tmp_path / "run", _slow_script(tmp_path)
    code = _interrupt(out, script, sig)
    assert code != 0
    assert _partial(out) is True
    report = runner.invoke(app, ["report", str(out), "--format", "md"])
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    assert report.exit_code == 0 and f"| {run_id} PARTIAL |" in report.stdout
    assert "PARTIAL run" in report.output  # the note beside the tables
    resumed = subprocess.run(_command(out, script, "--resume"), env=_env(), capture_output=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert _records(out) == PROBLEMS and _partial(out) is False


def test_a_completed_run_is_not_partial(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["eval", "-t", "arith", "--backend", "scripted", "--limit", "3", "--no-progress", "--no-plot"]
    result = runner.invoke(app, [*args, "--out", str(out)])  # the eval prints its report at the end
    assert result.exit_code == 0, result.output
    assert _partial(out) is False and "PARTIAL" not in result.output
