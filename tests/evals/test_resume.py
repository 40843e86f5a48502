"""Resume: SIGKILL the eval mid-run (a real subprocess), resume, compare with an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from evals.run.records import RECORDS_FILE, EvalRecord, read_records, record_key

ROOT = Path(__file__).resolve().parents[2]
TOTAL = 12 * 2  # 12 problems x (t_single, t_vote n=3)


def _command(out: Path, *extra: str) -> list[str]:
    return [
        sys.executable, str(ROOT / "tests/evals/run_cli.py"), "eval", "-t", "arith", "-s", "t_single,t_vote",
        "--n", "3", "--backend", "scripted", "--limit", "12", "--sample-seed", "5", "--max-concurrent", "1",
        "--no-progress", "--no-plot", "--out", str(out), *extra,
    ]  # fmt: skip


def _env() -> dict[str, str]:
    return {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _essence(records: list[EvalRecord]) -> set[tuple[Any, ...]]:
    """What must not depend on the kill: keys, answers, texts, grades (timings naturally differ)."""
    return {
        (
            record_key(r),
            r.result.answer,
            r.result.text,
            r.grade.outcome,
            r.result.usage.total_tokens,
        )
        for r in records
    }


def test_sigkill_mid_run_then_resume_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    subprocess.run(_command(whole), env=_env(), check=True, capture_output=True, timeout=120)

    proc = subprocess.Popen(
        _command(killed), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 60
    while _lines(killed / RECORDS_FILE) < 5 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    partial = len(read_records(killed))
    assert 5 <= partial < TOTAL, f"the kill landed after {partial} records"

    done = subprocess.run(
        _command(killed, "--resume"), env=_env(), capture_output=True, timeout=120, text=True
    )
    assert done.returncode == 0, done.stderr
    resumed = read_records(killed)
    keys = [record_key(r) for r in resumed]
    assert len(keys) == len(set(keys)) == TOTAL  # nothing lost, nothing duplicated
    assert _essence(resumed) == _essence(read_records(whole))
