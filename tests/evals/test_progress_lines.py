"""Without a terminal, a sweep reports one progress line at a steady interval on stderr."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import time
from pathlib import Path

from evals.run.progress import LineProgress

ROOT = Path(__file__).resolve().parents[2]


def test_line_progress_counts_done_total_rate_and_eta() -> None:
    stream = io.StringIO()
    with LineProgress(0.05, stream) as progress:
        task = progress.add_task("majority n=4", total=10, completed=2)  # two resumed from before
        for _ in range(4):
            progress.update(task, advance=1)
            time.sleep(0.05)
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 3  # a line every interval, and one at the end
    assert re.fullmatch(r"progress: 6/10 problems \(60%\), [\d.]+/min, \d+s, ETA \d+s", lines[-1])


def test_a_logged_sweep_prints_progress_lines_while_it_runs(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "evals.cli", "eval", "-t", "arith", "-s", "majority", "--n", "4",
            "--backend", "scripted", "--limit", "20", "--max-concurrent", "1",
            "--no-plot", "--out", str(tmp_path / "run")]  # fmt: skip
    env = {"PARAGEN_PROGRESS_INTERVAL": "0.05", "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("progress: ")]
    assert len(lines) >= 2, done.stderr
    assert lines[-1].startswith("progress: 20/20 problems (100%)")
    assert "━╸" not in done.stderr and "eta" not in done.stderr  # no rich bar drawn into the log
