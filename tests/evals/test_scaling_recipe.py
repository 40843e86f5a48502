"""docs/scaling.md's Slurm recipe, run as written: its array script under bash once per task (one
task twice, as a requeue) with the scripted backend, then its merge command; the merged records are
a one-process run's of the same sweep (run in this process, as the merge is)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evals.cli import app
from evals.run.records import EvalRecord, load_records

PAGE = Path(__file__).resolve().parents[2] / "docs" / "scaling.md"
pytestmark = pytest.mark.timeout(600)


def _blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", PAGE.read_text(), re.S)


def _array(script: str, cwd: Path, tasks: list[str]) -> None:
    """The array script under bash, one process per task, all at once (as Slurm starts them)."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # this venv's paragen
    env = {**os.environ, "PATH": path, "BACKEND": "scripted"}
    running = [
        subprocess.Popen(
            ["bash", "-c", script],
            cwd=cwd,
            env={**env, "SLURM_ARRAY_TASK_ID": task},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for task in tasks
    ]
    for task in running:
        output, _ = task.communicate(timeout=300)
        assert task.returncode == 0, output


def _cli(argv: list[str], cwd: Path) -> str:
    """A ``paragen`` command line of the page run in this process, in ``cwd``."""
    assert argv[0] == "paragen"
    here = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(app, argv[1:])
    finally:
        os.chdir(here)
    assert result.exit_code == 0, result.output
    return result.output


def _essence(records: list[EvalRecord]) -> list[tuple[object, ...]]:
    return sorted((r.key, r.result.text, r.result.answer, r.grade.outcome) for r in records)


def test_the_slurm_array_and_its_merge_give_the_one_process_sweep(tmp_path: Path) -> None:
    blocks = _blocks()  # and the Ray recipe, which needs a cluster (tests/evals/test_ray_launcher.py)
    array = next(block for block in blocks if "#SBATCH" in block)
    merge = next(block for block in blocks if block.startswith("paragen merge"))
    assert "#SBATCH --array=1-3" in array and merge.startswith("paragen merge")
    _array(array, tmp_path, ["1", "2", "3"])
    _array(array, tmp_path, ["2"])  # task 2 requeued: it goes on from its records
    merged_out = _cli(shlex.split(merge.strip()), tmp_path)
    # The same sweep in one process: the script's command without its shard.
    command = array.split("SHARDS=3\n", 1)[1].replace("\\\n", " ")
    whole = shlex.split(command.replace('--shard "$SLURM_ARRAY_TASK_ID/$SHARDS"', ""))
    values = {"$BACKEND": "scripted", "runs/sweep/$SLURM_ARRAY_TASK_ID": "runs/whole"}
    whole = [values.get(arg, arg) for arg in whole]
    _cli(whole, tmp_path)
    merged = load_records(tmp_path / "runs/sweep/all").latest()
    assert "18 records" in merged_out
    assert len(merged) == 18  # 6 problems x (single n=1, majority n=1, majority n=2)
    assert _essence(merged) == _essence(load_records(tmp_path / "runs/whole").latest())
