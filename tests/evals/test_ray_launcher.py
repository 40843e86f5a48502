"""`paragen eval --procs 3 --launcher ray` on a real Ray cluster on this machine: a head with no
CPUs (so every shard runs on a worker node) and three worker nodes of one CPU each, all started
with `ray start` as separate processes. Mid-sweep a node running a shard dies: its raylet and every
process below it are killed with SIGKILL. Ray retries that shard's task on another node, the retry
resumes from the records the lost attempt wrote, and the merged records equal a one-process
sweep's: on the scripted backend and on the engine (SmolLM2, a fixed seed). Then the launcher's bad
input, each one line and exit code 2 before anything runs."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from process_tree import descendants, parent_of
from typer.testing import CliRunner, Result

from evals.cli import app
from evals.run.records import RECORDS_FILE, EvalRecord, load_records, read_records

pytest.importorskip("ray")
# A Ray cluster of four nodes and three shard processes at a time on 2 shared cores.
pytestmark = pytest.mark.timeout(600)
ROOT = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).parent / "ray")
# Node death is noticed within about 1.5 s, not Ray's default of about 15 s.
HEALTH = {"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "3"}
SWEEP = ["eval", "-t", "arith", "-s", "single,majority", "--n", "2", "--limit", "6", "--seed", "7",
         "--max-concurrent", "1", "--no-progress", "--no-plot"]  # fmt: skip
HEADER = "ray: shard "


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0", **HEALTH}


class Cluster:
    """A Ray cluster on this machine whose every process names ``temp`` (its sockets and logs).

    Every node has the machine's address (Ray puts it in place of 127.0.0.1), and the driver is
    attached to one of them, maybe a worker node: it says which, and the test kills another.
    """

    def __init__(self, temp: Path) -> None:
        self.temp = temp
        self.address = ""

    def start(self, workers: int) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = str(probe.getsockname()[1])
        head = self._ray("--head", "--port", port, "--num-cpus", "0", "--include-dashboard", "false",
                         "--temp-dir", str(self.temp))  # fmt: skip
        self.address = re.findall(r"ray start --address='([^']+)'", head.communicate(timeout=120)[0])[0]
        for _ in range(workers):  # one at a time: nodes starting at once time out waiting for each other
            _started(self.add_worker())

    def add_worker(self) -> subprocess.Popen[str]:
        """A worker node of one CPU, starting (``ray start`` returns once it has joined)."""
        return self._ray("--address", self.address, "--num-cpus", "1")

    def _ray(self, *args: str) -> subprocess.Popen[str]:
        command = [RAY, "start", "--object-store-memory", "80000000", *args]
        return subprocess.Popen(
            command, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    def stop(self) -> None:
        """SIGKILL every process of the cluster; its Ray workers end with their raylets."""
        for pid in _pids_naming(str(self.temp)):
            _kill(pid)
        deadline = time.monotonic() + 20
        while _pids_naming(str(self.temp)) and time.monotonic() < deadline:
            time.sleep(0.1)


def _started(ray_start: subprocess.Popen[str]) -> None:
    output, _ = ray_start.communicate(timeout=120)
    assert ray_start.returncode == 0, output


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    # Short: Ray's unix sockets live under it, and their paths are limited to 107 bytes.
    temp = Path(tempfile.mkdtemp(prefix="pgray-", dir="/tmp"))
    running = Cluster(temp)
    try:
        running.start(workers=3)
        yield running
    finally:
        running.stop()


def _pids_naming(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            named = text.encode() in (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.name.isdigit() and named and state[0] != "Z" and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _essence(records: list[EvalRecord]) -> list[tuple[Any, ...]]:
    """What the launcher must not change: keys, every sampled text, answers, grades, tokens."""
    return sorted(
        (
            r.key,
            tuple(t.text for t in r.result.traces),
            r.result.answer,
            r.grade.outcome,
            r.result.usage.total_tokens,
        )
        for r in records
    )


class Whole:
    """The one-process run of a sweep, in the background (it overlaps the Ray sweep), read once."""

    def __init__(self, sweep: list[str], out: Path) -> None:
        self.out = out
        self.log = out.with_suffix(".log")
        with self.log.open("wb") as sink:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "paragen.cli", *sweep, "--out", str(out)],
                env=_env(), cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self._essence: list[tuple[Any, ...]] | None = None

    def essence(self) -> list[tuple[Any, ...]]:
        if self._essence is None:
            assert self.process.wait(timeout=300) == 0, self.log.read_text()
            self._essence = _essence(read_records(self.out))
        return self._essence

    def stop(self) -> None:
        _kill(self.process.pid)
        self.process.wait()


def _scripted_sweep(folder: Path, token_delay: float) -> tuple[list[str], Whole]:
    """The sweep on the scripted backend, 4 tokens a sample ``token_delay`` apart, and its
    one-process run (started now, in the background)."""
    script = folder / "slow.jsonl"
    script.write_text(json.dumps({"text": "The answer is \\boxed{7}.", "token_delay": token_delay}) + "\n")
    sweep = [*SWEEP, "--backend", f"scripted:{script}"]
    return sweep, Whole(sweep, folder / "whole")


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[str], Whole]]:
    """A sweep at 0.4 s a sample (the test's own kill lands mid-shard), and its one-process run,
    shared by the tests that kill a node."""
    sweep, whole = _scripted_sweep(tmp_path_factory.mktemp("scripted"), 0.1)
    yield sweep, whole
    whole.stop()


@pytest.fixture
def slower(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[str], Whole]]:
    """The sweep at 2 s a sample, 12 s a shard: a SIGTERM's cancel, which goes through Ray (seconds on
    a loaded machine), still finds each shard mid-run."""
    sweep, whole = _scripted_sweep(tmp_path_factory.mktemp("slower"), 0.5)
    yield sweep, whole
    whole.stop()


def _kill_a_node_mid_shard(out: Path, parent: subprocess.Popen[bytes], log: Path) -> tuple[Path, float]:
    """Once a shard on another node than the driver's has a record: SIGKILL that node, its raylet
    (the parent of the Ray worker the shard log's header names) and every process below it. The
    shard's folder and the time of the kill."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert parent.poll() is None, log.read_text()
        driver = re.findall(r"this driver is on node (\w+)", log.read_text())
        for folder in sorted((out / "shards").glob("*-of-3")):
            records = folder / RECORDS_FILE
            if not driver or not records.is_file() or not records.read_bytes().count(b"\n"):
                continue
            node, worker = _attempt(_headers(folder)[0])
            if node == driver[0]:
                continue
            raylet = parent_of(worker)
            assert b"raylet" in (Path("/proc") / str(raylet) / "cmdline").read_bytes()
            # The node dies: its raylet, Ray workers and what they run.
            for pid in {raylet} | descendants(raylet):
                _kill(pid)
            return folder, time.time()
        time.sleep(0.02)
    raise AssertionError(f"no shard recorded anything: {log.read_text()}")


def _attempt(header: str) -> tuple[str, int]:
    """The node and Ray worker pid an attempt's header line names."""
    match = re.search(r"on node (\w+) \(worker pid (\d+)", header)
    assert match is not None, header
    return match[1], int(match[2])


def _headers(folder: Path) -> list[str]:
    log = folder.with_suffix(".log")
    return [line for line in log.read_text().splitlines() if line.startswith(HEADER)]


def _ray_sweep_with_a_node_killed(cluster: Cluster, sweep: list[str], out: Path) -> list[EvalRecord]:
    """The sweep as 3 Ray tasks, one node killed mid-shard; checks the retry, returns the merge."""
    command = [sys.executable, "-m", "paragen.cli", *sweep, "--procs", "3", "--launcher", "ray",
               "--ray-address", cluster.address, "--out", str(out)]  # fmt: skip
    log = out.with_suffix(".log")
    with log.open("wb") as sink:
        parent = subprocess.Popen(command, env=_env(), cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)
    try:
        killed, at = _kill_a_node_mid_shard(out, parent, log)
        replacement = cluster.add_worker()  # so the next sweep has three workers again
        assert parent.wait(timeout=400) == 0, log.read_text()
        _started(replacement)
    finally:
        _kill(parent.pid)
    first, retry = _headers(killed)  # the lost attempt and its retry, on another node
    assert _attempt(first)[0] != _attempt(retry)[0]
    raw = load_records(killed).records
    before = [r for r in raw if r.recorded_at < at]
    assert before and len(before) < len(raw), "killed mid-shard: each attempt recorded some units"
    assert len({r.key for r in raw}) == len(raw), "the retry skipped what was recorded"
    assert _pids_naming(str(out)) == [], "no shard process outlives the sweep"
    return read_records(out)


def test_a_ray_sweep_with_a_node_killed_equals_the_one_process_sweep_on_the_scripted_backend(
    tmp_path: Path, cluster: Cluster, scripted: tuple[list[str], Whole]
) -> None:
    sweep, whole = scripted
    merged = _ray_sweep_with_a_node_killed(cluster, sweep, tmp_path / "ray")
    assert len(merged) == 12  # 6 problems x (single, majority n=2)
    assert _essence(merged) == whole.essence()


def test_a_ray_sweep_with_a_node_killed_equals_the_one_process_sweep_on_the_engine(
    tmp_path: Path, cluster: Cluster, smol_dir: Path
) -> None:
    # One problem at a time: the engine's bf16 numerics depend on what shares a batch (test_shards_engine).
    # One thread each: three shard processes at once on 2 cores, none spinning on another's core.
    sweep = [*SWEEP, "--backend", "engine", "--backend-opt", "threads=1", "--max-tokens", "8"]
    whole = Whole(sweep, tmp_path / "whole")
    try:
        merged = _ray_sweep_with_a_node_killed(cluster, sweep, tmp_path / "ray")
        assert len(merged) == 12
        assert _essence(merged) == whole.essence()
    finally:
        whole.stop()


def test_sigterm_cancels_the_tasks_and_the_same_command_with_resume_completes(
    tmp_path: Path, cluster: Cluster, slower: tuple[list[str], Whole]
) -> None:
    sweep, whole = slower
    out = tmp_path / "ray"
    # Two shards: fewer processes to start.
    command = [sys.executable, "-m", "paragen.cli", *sweep, "--procs", "2", "--launcher", "ray",
               "--ray-address", cluster.address, "--out", str(out)]  # fmt: skip
    parent = subprocess.Popen(
        command, env=_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        records = [out / "shards" / f"{j}-of-2" / RECORDS_FILE for j in (1, 2)]
        deadline = time.monotonic() + 240
        # At the first record of either shard: that shard is mid-run (5 of its 6 records, about 10 s,
        # to go). Waiting for a record of both let one finish first where the other started late.
        while not any(r.is_file() and r.stat().st_size for r in records) and time.monotonic() < deadline:
            assert parent.poll() is None
            time.sleep(0.02)
        parent.send_signal(signal.SIGTERM)
        _, stderr = parent.communicate(timeout=60)
    finally:
        _kill(parent.pid)
    assert parent.returncode == 143, stderr
    assert _pids_naming(str(out)) == [], "every shard process was stopped"
    assert not (out / RECORDS_FILE).exists()  # nothing merged
    recorded = sum(len(read_records(r.parent)) for r in records)
    assert 1 <= recorded < 12, "stopped mid-sweep"
    again = subprocess.run(
        [*command, "--resume"], env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stderr
    assert _essence(read_records(out)) == whole.essence()


BAD = [
    (["--launcher", "ray"], "--launcher ray runs the sweep's shards as Ray tasks (give --procs P"),
    (["--launcher", "slurm", "--procs", "2"], "bad --launcher 'slurm'"),
    (["--procs", "2", "--ray-address", "127.0.0.1:1"], "--ray-address is an option of --launcher ray"),
    (["--procs", "2", "--launcher", "ray", "--ray-gpus", "-1"], "bad --ray-gpus -1.0"),
    (
        ["--procs", "2", "--launcher", "ray", "--ray-address", "127.0.0.1:1"],
        "cannot reach the Ray cluster at 127",
    ),
]


@pytest.mark.parametrize(("args", "line"), BAD)
def test_bad_launcher_input_is_one_line_and_exit_2_with_nothing_written(
    tmp_path: Path, args: list[str], line: str
) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(app, [*SWEEP, "--backend", "scripted", *args, "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert line in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert not out.exists()


def test_ray_address_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    out = tmp_path / "run"
    args = [*SWEEP, "--backend", "scripted", "--procs", "2", "--launcher", "ray", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "cannot reach the Ray cluster at 127.0.0.1:1" in result.output
    assert not out.exists()


def test_without_ray_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    args = [
        *SWEEP,
        "--backend",
        "scripted",
        "--procs",
        "2",
        "--launcher",
        "ray",
        "--out",
        str(tmp_path / "r"),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "needs Ray, which is not installed" in result.output
    assert "pip install 'paragen[ray]'" in result.output and not (tmp_path / "r").exists()


def _on_no_cluster(procs: int, out: Path) -> Result:
    """The scripted sweep as ``procs`` Ray shards, at an address where no cluster listens."""
    args = [
        "--backend",
        "scripted",
        "--procs",
        str(procs),
        "--launcher",
        "ray",
        "--ray-address",
        "127.0.0.1:1",
    ]
    return CliRunner().invoke(app, [*SWEEP, *args, "--out", str(out)])


def test_shards_of_an_earlier_sweep_are_refused_without_resume(tmp_path: Path) -> None:
    shard = tmp_path / "run" / "shards" / "1-of-2"
    shard.mkdir(parents=True)
    (shard / "run.json").write_text("{}")
    result = _on_no_cluster(2, tmp_path / "run")
    assert result.exit_code == 2 and "holds shards of a run (pass --resume" in result.output
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [".paragen.lock", "shards"]


def test_procs_on_ray_is_not_capped_by_this_machine(tmp_path: Path) -> None:
    result = _on_no_cluster(1000, tmp_path / "run")
    assert result.exit_code == 2 and "cannot reach the Ray cluster" in result.output, result.output
