"""`paragen eval --procs P`: real child processes, merged; a signal to the parent ends them all."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from process_tree import descendants
from typer.testing import CliRunner

from evals.cli import app
from evals.run.lock import FolderLocked, holder_pid, run_folder_lock
from evals.run.records import RECORDS_FILE, EvalRecord, read_records, read_run_info

# Several eval runs, each starting its grading pool: minutes on 2 busy cores.
pytestmark = pytest.mark.timeout(900)
ROOT = Path(__file__).resolve().parents[2]
SWEEP = ["eval", "-t", "arith", "-s", "single,majority", "--n", "3", "--backend", "scripted", "--seed", "3",
         "--max-concurrent", "1", "--no-progress", "--no-plot"]  # fmt: skip


def _env() -> dict[str, str]:
    return {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


def _default_sigint() -> None:
    # A child inherits an ignored SIGINT (as from a shell's background job or a test runner that
    # ignores it), and Python then installs no handler: Ctrl-C is what this test sends, so undo that.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _paragen(*args: str) -> list[str]:
    return [sys.executable, "-m", "paragen.cli", *args]


def _essence(records: list[EvalRecord]) -> list[tuple[Any, ...]]:
    return sorted((r.key, r.result.text, r.result.answer, r.grade.outcome) for r in records)


def _whole(out: Path, limit: str, sweep: list[str] = SWEEP) -> list[EvalRecord]:
    result = CliRunner().invoke(app, [*sweep, "--limit", limit, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return read_records(out)


def _processes_naming(folder: Path) -> list[int]:
    """Live processes whose command line names ``folder`` (the children write under it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(folder).encode() in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def test_procs_runs_shards_as_processes_and_merges_them(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = subprocess.run(
        _paragen(*SWEEP, "--limit", "4", "--procs", "2", "--out", str(out)),
        env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    shards = sorted(p.name for p in (out / "shards").iterdir())
    assert shards == ["1-of-2", "1-of-2.log", "2-of-2", "2-of-2.log"]
    assert [len(read_records(out / "shards" / name)) for name in ("1-of-2", "2-of-2")] == [4, 4]
    info = read_run_info(out)
    assert info.shard is not None and (info.shard.count, info.shard.indices) == (2, [1, 2])
    assert _essence(read_records(out)) == _essence(_whole(tmp_path / "whole", "4"))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_parent_ends_every_child_and_resume_completes(tmp_path: Path, signum: int) -> None:
    # Samples of 0.3 s: each shard runs about 6 s past its first record, so the signal lands mid-run
    # (the built-in responder's sweep ends within a second of it, too close to stop reliably).
    script = tmp_path / "slow.jsonl"
    script.write_text(json.dumps({"text": "The answer is \\boxed{7}.", "token_delay": 0.05}) + "\n")
    sweep = [part if part != "scripted" else f"scripted:{script}" for part in SWEEP]
    out = tmp_path / "run"
    command = _paragen(*sweep, "--limit", "20", "--procs", "2", "--out", str(out))
    log = tmp_path / "parent.log"
    with log.open("wb") as sink:
        parent = subprocess.Popen(
            command, env=_env(), cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, preexec_fn=_default_sigint
        )
    firsts = [out / "shards" / name / RECORDS_FILE for name in ("1-of-2", "2-of-2")]
    deadline = time.monotonic() + 120
    while not all(p.is_file() and p.stat().st_size for p in firsts) and time.monotonic() < deadline:
        assert parent.poll() is None, log.read_text()
        time.sleep(0.02)
    assert _processes_naming(out), "the children are running"
    parent.send_signal(signum)
    assert parent.wait(timeout=60) != 0
    deadline = time.monotonic() + 10
    while _processes_naming(out) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_naming(out) == []
    stopped = sum(len(read_records(p.parent)) for p in firsts)
    assert 2 <= stopped < 40 and not (out / RECORDS_FILE).exists()  # stopped mid-run, nothing merged

    done = subprocess.run(
        [*command, "--resume"], env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert _essence(read_records(out)) == _essence(_whole(tmp_path / "whole", "20", sweep))


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_kill_9_of_the_parent_ends_the_whole_sweep_and_frees_its_folders(tmp_path: Path) -> None:
    """SIGKILL runs no handler: the children see their parent go and end, their graders with them."""
    script = tmp_path / "slow.jsonl"
    script.write_text(json.dumps({"text": "The answer is \\boxed{7}.", "token_delay": 0.3}) + "\n")
    sweep = [part if part != "scripted" else f"scripted:{script}" for part in SWEEP]
    out = tmp_path / "run"
    command = _paragen(*sweep, "--limit", "30", "--procs", "3", "--out", str(out))
    parent = subprocess.Popen(
        command, env=_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    folders = [out / "shards" / f"{j}-of-3" for j in (1, 2, 3)]
    deadline = time.monotonic() + 120
    while not all((f / RECORDS_FILE).is_file() for f in folders) and time.monotonic() < deadline:
        assert parent.poll() is None
        time.sleep(0.05)
    sweep_pids = descendants(parent.pid)
    children = {holder_pid(f) for f in folders}
    assert None not in children and children <= sweep_pids and len(sweep_pids) > 3
    with pytest.raises(FolderLocked, match=f"pid {holder_pid(folders[1])}"), run_folder_lock(folders[1]):
        pass  # a second writer while the child lives
    assert parent.poll() is None, "the sweep is still running"
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in sweep_pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [pid for pid in sweep_pids if _alive(pid)] == []
    assert _processes_naming(out) == []
    with run_folder_lock(out), run_folder_lock(folders[0]):  # the dead writers' locks are free
        pass


def test_procs_refuses_a_folder_that_holds_a_run_before_starting_children(tmp_path: Path) -> None:
    _whole(tmp_path / "run", "2")
    result = CliRunner().invoke(app, [*SWEEP, "--limit", "2", "--procs", "2", "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and "already holds a run" in result.output
    assert not (tmp_path / "run" / "shards").exists()


def test_a_child_that_refuses_its_folder_stops_the_parent_before_the_merge(tmp_path: Path) -> None:
    out = tmp_path / "run"
    (out / "shards").mkdir(parents=True)
    (out / "shards" / "2-of-2").write_text("a file where the shard's folder goes")
    result = CliRunner().invoke(app, [*SWEEP, "--limit", "2", "--procs", "2", "--out", str(out)])
    assert result.exit_code == 2
    assert "shard 2/2 exited 2: " in result.output and "it is a file" in result.output
    assert not (out / RECORDS_FILE).exists() and not (out / "run.json").exists()


def test_a_shard_killed_mid_run_then_resumed_merges_to_the_whole_run(tmp_path: Path) -> None:
    """SIGKILL (nothing unwinds) one of 3 shard processes after its second record."""
    shards = [tmp_path / f"s{i}" for i in (1, 2, 3)]

    def shard(index: int) -> list[str]:
        return _paragen(*SWEEP, "--limit", "12", "--shard", f"{index}/3", "--out", str(shards[index - 1]))

    for index in (1, 3):
        subprocess.run(shard(index), env=_env(), cwd=ROOT, check=True, capture_output=True, timeout=300)
    command = shard(2)
    victim = subprocess.Popen(
        command, env=_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    records = shards[1] / RECORDS_FILE
    deadline = time.monotonic() + 120
    while (not records.is_file() or records.read_bytes().count(b"\n") < 2) and time.monotonic() < deadline:
        assert victim.poll() is None
        time.sleep(0.005)
    victim.kill()
    victim.wait(timeout=30)
    assert 2 <= len(read_records(shards[1])) < 8  # shard 2 of 3 owns 8 of the 24 units

    merge = _paragen("merge", str(tmp_path / "merged"), *map(str, shards))
    refused = subprocess.run(merge, env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "s2 is not finished" in refused.stderr
    subprocess.run([*command, "--resume"], env=_env(), cwd=ROOT, check=True, capture_output=True, timeout=300)
    subprocess.run(merge, env=_env(), cwd=ROOT, check=True, capture_output=True, timeout=120)
    assert _essence(read_records(tmp_path / "merged")) == _essence(_whole(tmp_path / "whole", "12"))


def test_shard_with_procs_per_node_then_one_merge_of_the_nodes(tmp_path: Path) -> None:
    """The multi-node recipe: `--shard I/2 --procs 2` per node (shards of 4), then merge the nodes."""
    for node in (1, 2):
        args = [
            *SWEEP,
            "--limit",
            "3",
            "--shard",
            f"{node}/2",
            "--procs",
            "2",
            "--out",
            str(tmp_path / f"n{node}"),
        ]
        subprocess.run(_paragen(*args), env=_env(), cwd=ROOT, check=True, capture_output=True, timeout=300)
    held = [read_run_info(tmp_path / f"n{node}").shard for node in (1, 2)]
    assert [(s.count, s.indices) if s else None for s in held] == [(4, [1, 2]), (4, [3, 4])]
    merge = _paragen("merge", str(tmp_path / "all"), str(tmp_path / "n2"), str(tmp_path / "n1"))
    subprocess.run(merge, env=_env(), cwd=ROOT, check=True, capture_output=True, timeout=120)
    assert _essence(read_records(tmp_path / "all")) == _essence(_whole(tmp_path / "whole", "3"))
