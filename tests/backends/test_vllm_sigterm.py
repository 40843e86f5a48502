"""`paragen eval` on in-process vLLM, stopped by SIGTERM, leaves no vLLM process behind.

What it guards against: the eval process dying on the spot while vLLM's engine-core and worker
processes go on decoding as orphans, ignoring SIGTERM. Runs in the vLLM venv (`make unit-vllm`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from real_servers import missing, smollm2_dir, vllm_env

pytestmark = [pytest.mark.vllm]


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # it ended while we looked
            tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _descendants(pid: int) -> set[int]:
    tree, found, todo = _children(), set[int](), [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _engine_processes(pid: int) -> set[int]:
    """vLLM's engine core and its workers (they name themselves VLLM::...)."""
    named = set()
    for child in _descendants(pid):
        try:
            if Path(f"/proc/{child}/comm").read_text().startswith("VLLM"):
                named.add(child)
        except OSError:
            continue
    return named


def test_sigterm_closes_the_vllm_engine(tmp_path: Path) -> None:
    try:
        import vllm  # noqa: F401
    except ImportError:
        missing("vLLM is not installed in this interpreter", "make setup-vllm; run pytest from .venv-vllm")
    argv = ["eval", "-t", "arith", "--limit", "8", "-s", "majority", "--n", "4", "--max-tokens", "1024"]
    argv += ["-b", f"vllm:{smollm2_dir()}", "--backend-opt", "enforce_eager=true"]
    argv += ["--backend-opt", "max_model_len=2048", "-o", str(tmp_path / "run")]
    argv += ["--no-progress", "--no-plot", "--offline"]
    # vLLM logs a lot: to a file, as a pipe nobody reads while waiting would fill and stall it.
    log = tmp_path / "stderr.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "paragen.cli", *argv], env=vllm_env(), stderr=stderr
        )
    engine: set[int] = set()
    try:
        deadline = time.monotonic() + 600
        while process.poll() is None and time.monotonic() < deadline and len(engine) < 2:
            engine = _engine_processes(process.pid)  # engine core and worker
            time.sleep(1.0)
        assert len(engine) >= 2, f"no vLLM processes (exit {process.poll()}):\n{log.read_text()[-2000:]}"
        time.sleep(5.0)  # decoding by now
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
        assert process.returncode == 143, log.read_text(errors="replace")[-2000:]
        gone_by = time.monotonic() + 30
        while any(_alive(pid) for pid in engine) and time.monotonic() < gone_by:
            time.sleep(0.5)
        assert not [pid for pid in engine if _alive(pid)], "vLLM's processes outlived paragen"
    finally:
        process.kill()
        for pid in engine:  # never leave an orphan decoding on a shared machine
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
