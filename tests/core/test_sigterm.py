"""SIGTERM unwinds a run like a cancellation: `finally` blocks run, the command exits 143 with one line.

Python's default SIGTERM kills the process where it stands; an in-process vLLM engine's worker
processes then outlive it (tests/backends/test_vllm_inprocess.py checks that case on real vLLM).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from paragen.signals import Terminated, until_terminated


@pytest.mark.anyio
async def test_sigterm_cancels_main_and_runs_its_cleanup() -> None:
    closed: list[str] = []

    async def main() -> str:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            await anyio.sleep(30)
            return "finished"
        finally:
            closed.append("backend closed")

    with anyio.fail_after(10), pytest.raises(Terminated):
        await until_terminated(main)
    assert closed == ["backend closed"]


@pytest.mark.anyio
async def test_result_and_errors_pass_through_unwrapped() -> None:
    async def answer() -> int:
        return 42

    async def broken() -> int:
        raise ValueError("not a group")

    assert await until_terminated(answer) == 42
    with pytest.raises(ValueError, match="not a group"):
        await until_terminated(broken)


def _script(tmp_path: Path) -> Path:
    """Slow samples (50 tokens, 0.2 s apart): a problem takes ~10 s, so SIGTERM lands mid-run."""
    script = {"text": " ".join(["word"] * 49) + " \\boxed{4}", "token_delay": 0.2}
    path = tmp_path / "slow.jsonl"
    path.write_text(json.dumps(script) + "\n")
    return path


def _eval(tmp_path: Path, out: Path, *extra: str) -> subprocess.Popen[bytes]:
    argv = ["eval", "-t", "arith", "--limit", "6", "-b", f"scripted:{_script(tmp_path)}", "-o", str(out)]
    argv += ["--max-concurrent", "2", "--no-progress", "--no-plot", "--offline", *extra]
    command = [sys.executable, "-m", "paragen.cli", *argv]
    return subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _records(out: Path) -> list[dict[str, object]]:
    path = out / "records.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]  # every line whole


def test_eval_stopped_by_sigterm_keeps_its_records_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    process = _eval(tmp_path, out)
    try:
        _stop_mid_run(process, out)
    finally:
        process.kill()  # a no-op when it exited as it should
    kept = len(_records(out))
    assert 1 <= kept < 6

    resumed = _eval(tmp_path, out, "--resume")
    _, stderr = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, stderr.decode()
    ids = [str(r["problem"]["id"]) for r in _records(out)]  # type: ignore[index]
    assert len(ids) == len(set(ids)) == 6


def _stop_mid_run(process: subprocess.Popen[bytes], out: Path) -> None:
    deadline = time.monotonic() + 120
    while not _records(out) and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)
    if process.poll() is not None:
        pytest.fail(f"eval ended before SIGTERM: {process.communicate()[1].decode()}")
    assert _records(out), "no problem finished within 120 s"
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    lines = stderr.decode().strip().splitlines()
    assert process.returncode == 143, stderr.decode()
    assert len(lines) == 1 and "SIGTERM" in lines[0], stderr.decode()
