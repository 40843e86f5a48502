"""`make demo` runs the model or stops: no scripted stand-in passes for it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_stops_with_one_line_when_its_model_cannot_load(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model.gguf"
    out = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "evals.demo", "--model", str(missing), "--out", str(out)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "could not be loaded" in lines[0] and str(missing) in lines[0], done.stderr
    assert "Traceback" not in done.stderr and "scripted" not in (done.stdout + done.stderr).lower()
    assert not out.exists()  # nothing ran, nothing was written
