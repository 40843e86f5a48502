"""Baselines measured in a child process: one that crashes is that baseline's failure, not the benchmark's.

A native library can die with a signal (llama.cpp built for instructions the CPU cannot run raises
SIGILL at its first forward pass) and take the whole benchmark with it. Run in a child, its figure
becomes ``None`` with one line saying why, and the benchmark still prints its JSON line.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Sequence


def run_isolated(args: Sequence[str], *, timeout_s: float = 600) -> tuple[float | None, str | None]:
    """Run ``python ARGS``; the number its last stdout line prints, or ``(None, why)``.

    The child prints ``none: WHY`` for a baseline that is missing (a package not installed).
    """
    try:
        done = subprocess.run(
            [sys.executable, *args], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return None, f"no answer within {timeout_s:g} s"
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    if done.returncode == 0 and last.startswith("none:"):
        return None, last.removeprefix("none:").strip()
    if done.returncode == 0:
        try:
            return float(last), None
        except ValueError:
            return None, f"unreadable answer {last[:80]!r}"
    return None, _death(done.returncode, done.stderr)


def _death(returncode: int, stderr: str) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"crashed ({name})"
    tail = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    return f"failed (exit {returncode}){': ' + tail[:160] if tail else ''}"
