"""What guards a run folder: one writer at a time (a live holder refused in one line, a dead one's
lock taken over), merge only into a new or empty folder, preset files read by the rules of ``-O``,
typed errors from the Python API, the ``paragen:`` prefix, and a prompt file kept once per run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evals.cli import app
from evals.run.lock import LOCK_NAME, FolderLocked, holder_pid, run_folder_lock
from evals.run.merge import merge_shards
from evals.run.procs import max_procs
from evals.run.records import RECORDS_FILE, RUN_FILE
from paragen.errors import ConfigError

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
SWEEP = ["eval", "-t", "arith", "-s", "single", "--backend", "scripted", "--limit", "2", "--no-progress",
         "--no-plot"]  # fmt: skip
HOLD = "import sys,time; from pathlib import Path; from evals.run.lock import run_folder_lock as L\n" \
       "with L(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(120)"  # fmt: skip


def _holder(folder: Path) -> subprocess.Popen[str]:
    """Another process holding ``folder``'s lock (it says "held" once it does)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)], env=env, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    return process


def _one_error_line(output: str) -> str:
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert lines[0].startswith("paragen: "), lines[0]
    return lines[0]


def test_a_live_writer_refuses_a_second_and_a_dead_ones_lock_is_taken_over(tmp_path: Path) -> None:
    out = tmp_path / "run"
    holder = _holder(out)
    try:
        result = runner.invoke(app, [*SWEEP, "--out", str(out)])
        assert result.exit_code == 2
        line = _one_error_line(result.output)
        assert f"is being written by pid {holder.pid} on " in line
        merged = runner.invoke(app, ["merge", str(out), str(tmp_path / "s1")])
        assert merged.exit_code == 2 and f"pid {holder.pid}" in _one_error_line(merged.output)
        assert not (out / RECORDS_FILE).exists()
    finally:
        holder.send_signal(signal.SIGKILL)  # nothing unwinds: the lock file still names it
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()
    assert holder_pid(out) == holder.pid
    with run_folder_lock(out):
        assert holder_pid(out) == os.getpid()
        with pytest.raises(FolderLocked, match=f"pid {os.getpid()}"), run_folder_lock(out):
            pass  # held here: one writer only, even in the same process


def test_a_refused_lock_leaves_no_folder_behind(tmp_path: Path) -> None:
    with run_folder_lock(tmp_path / "new"):
        assert (tmp_path / "new" / LOCK_NAME).is_file()
    assert not (tmp_path / "new").exists()


def test_merge_refuses_a_folder_with_records_and_leaves_it_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / RECORDS_FILE).write_text('{"someone": "else\'s"}\n')
    result = runner.invoke(app, ["merge", str(out), str(tmp_path / "a1of2"), str(tmp_path / "a2of2")])
    assert result.exit_code == 2
    assert "already holds records" in _one_error_line(result.output)
    assert sorted(p.name for p in out.iterdir()) == [RECORDS_FILE]
    assert (out / RECORDS_FILE).read_text() == '{"someone": "else\'s"}\n'


def test_merge_shards_refuses_what_is_not_a_path_with_a_typed_error(tmp_path: Path) -> None:
    os.chdir(tmp_path)
    with pytest.raises(ConfigError, match=f"b holds no {RUN_FILE}"):
        merge_shards("a", ["b"])  # str paths are paths
    with pytest.raises(ConfigError, match="a list of paths"):
        merge_shards("a", "b")
    with pytest.raises(ConfigError, match="must be a path, not int"):
        merge_shards("a", [3])  # type: ignore[list-item]
    assert not (tmp_path / "a").exists()


def test_procs_beyond_the_machine_is_refused_in_one_line(tmp_path: Path) -> None:
    result = runner.invoke(app, [*SWEEP, "--procs", str(max_procs() + 1), "--out", str(tmp_path / "r")])
    assert result.exit_code == 2
    assert f"this machine runs at most {max_procs()}" in _one_error_line(result.output)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ("[options.nosuch]\nk = 1\n", "[options.nosuch] names 'nosuch', which is not among its strategies"),
        ('[options.majority]\nn = "many"\n', "[options.majority] n: the preset's n sets it"),
        ('[options.majority]\nfinisher_tokens = "lots"\n', "[options.majority] finisher_tokens:"),
        ("[options.majority]\nwhat = 1\n", "[options.majority] has no option 'what'"),
    ],
)
def test_a_preset_file_is_read_by_the_rules_of_strategy_options(
    tmp_path: Path, table: str, expected: str
) -> None:
    preset = tmp_path / "mine.toml"
    preset.write_text(
        'paper = "p"\nmodel = "m"\ntask = "arith"\nprompt = "paragen"\ntemperature = 0.7\ntop_p = 1.0\n'
        'max_tokens = 64\nn = [3]\nstrategies = ["single", "majority"]\nreproduced = false\n'
        f"{table}\n"
        '[[published]]\nmetric = "accuracy"\nstrategy = "majority"\nvalue = 50.0\nsource = "s"\n'
    )
    result = runner.invoke(app, ["eval", "--preset", str(preset), "--backend", "scripted", "--out",
                                 str(tmp_path / "r")])  # fmt: skip
    assert result.exit_code == 2
    assert expected in _one_error_line(result.output)
    assert not (tmp_path / "r").exists()


def test_a_prompt_file_is_kept_once_in_run_json_and_named_in_each_record(tmp_path: Path) -> None:
    words = "Solve this, thinking of the following: " + "x" * 2_000_000 + "\n\n{problem}"
    prompt = tmp_path / "long.txt"
    prompt.write_text(words)
    result = runner.invoke(app, [*SWEEP, "--prompt", str(prompt), "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    info = json.loads((tmp_path / "r" / RUN_FILE).read_text())
    assert info["prompt"]["user"] == words
    lines = (tmp_path / "r" / RECORDS_FILE).read_text().splitlines()
    assert len(lines) == 2 and all(len(line) < 20_000 for line in lines)
    named = [json.loads(line)["prompt"] for line in lines]
    assert named == [{"name": "long", "source": str(prompt), "sha256": info["prompt"]["sha256"]}] * 2
