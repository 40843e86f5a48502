"""`paragen eval --procs P --launcher ray`: a sweep's P shards as Ray tasks on a running cluster.

paragen schedules nothing of its own here: each shard is one Ray task, and Ray places it, retries
it when its worker or node dies (``max_retries``), and cancels it. The task runs the very child
command of ``--procs`` (:mod:`evals.run.procs`) as a subprocess of the Ray worker, always with
``--resume``, in the same folder ``OUT/shards/J-of-P``: a retried task continues its shard from
the records the lost attempt wrote. So every node must see ``OUT`` at the same path (a shared
filesystem), and run the same paragen. The parent, on the machine the command runs on, waits for
the tasks and merges their folders into ``OUT`` exactly as ``--procs`` does.

A lost attempt's child ends by itself: its parent (the Ray worker) is gone, and
:mod:`evals.run.orphans` turns that into SIGTERM. A retry that lands while the old child is still
writing (the same machine, or a filesystem whose locks outlive the node for a while) waits for the
shard folder's lock first. Ctrl-C or SIGTERM of the parent cancels the tasks; a cancelled task
stops its child with SIGTERM, so what the child finished stays on disk for ``--resume``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from evals.run.lock import FolderLocked, run_folder_lock
from evals.run.orphans import parent_env
from evals.run.procs import GRACE_S, Child
from evals.run.shards import Shard
from paragen.errors import ConfigError

LAUNCHERS = ("local", "ray")
RETRIES = 3  # attempts after the first, each on whatever node Ray picks, resuming the shard
POLL_S = 0.2  # how often the parent asks Ray which tasks are done, and a task whether its child is
LOCK_WAIT_S = 60.0  # how long a retry waits for a lost attempt's child to let go of the shard folder
CONNECT_TIMEOUT_S = 5.0
EXIT_LOST = 4  # Ray gave a shard's task up (lost past RETRIES, or the driver's node died): --resume goes on
INSTALL_HINT = "pip install 'paragen[ray]' on every node (the same Ray version as the cluster)"
ADDRESS_HINT = "start one with `ray start --head`, or give --ray-address HOST:PORT (or RAY_ADDRESS)"
HEADER = "ray: shard {shard} attempt on node {node} (worker pid {pid}, host {host})"


@dataclass(frozen=True)
class RayLaunch:
    """Where and how the shards run: the cluster's address and each task's GPUs."""

    address: str
    gpus: float = 0.0


def check_launcher(launcher: str, procs: int | None, address: str | None, gpus: float | None) -> None:
    """``--launcher`` and its options, refused in one line before anything loads; Ray importable."""
    if launcher not in LAUNCHERS:
        raise ConfigError(f"bad --launcher {launcher!r}", hint="give local or ray")
    if launcher == "local":
        given = [
            flag for flag, value in (("--ray-address", address), ("--ray-gpus", gpus)) if value is not None
        ]
        if given:
            raise ConfigError(
                f"{given[0]} is an option of --launcher ray", hint="add --launcher ray --procs P"
            )
        return
    if procs is None:
        raise ConfigError(
            "--launcher ray runs the sweep's shards as Ray tasks", hint="give --procs P: P shards"
        )
    if gpus is not None and gpus < 0:
        raise ConfigError(f"bad --ray-gpus {gpus}: it must be at least 0")
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ConfigError("--launcher ray needs Ray, which is not installed", hint=INSTALL_HINT) from None


def chosen_launch(
    launcher: str, procs: int | None, address: str | None, gpus: float | None
) -> RayLaunch | None:
    """The flags' Ray launch (None: ``--launcher local``), checked by :func:`check_launcher`."""
    check_launcher(launcher, procs, address, gpus)
    return RayLaunch(cluster_address(address), gpus or 0.0) if launcher == "ray" else None


def cluster_address(given: str | None) -> str:
    """The cluster to join: ``--ray-address``, else RAY_ADDRESS, else the one started on this machine."""
    return given or os.environ.get("RAY_ADDRESS") or "auto"


def connect(address: str) -> str:
    """Join the cluster at ``address`` as a driver, or one ConfigError line; never start a cluster.
    The id of the node this driver is attached to (its tasks fail if that node dies)."""
    import ray

    _check_reachable(address)
    try:
        with warnings.catch_warnings():  # Ray's notes on its own future defaults, not the user's concern
            warnings.simplefilter("ignore", FutureWarning)
            # Never a new local cluster: "auto" finds one started with `ray start`, or fails.
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    except Exception as exc:  # Ray's own errors (ConnectionError, RuntimeError, ...) at the boundary
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"cannot join the Ray cluster at {address}: {first}", hint=ADDRESS_HINT) from exc
    return str(ray.get_runtime_context().get_node_id())


def _check_reachable(address: str) -> None:
    """A TCP connect to a ``HOST:PORT`` address first: Ray's own connect retries for a minute."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto", "local": Ray looks the cluster up itself, and fails at once without one
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise ConfigError(f"cannot reach the Ray cluster at {address}: {exc}", hint=ADDRESS_HINT) from None


async def run_tasks(children: Sequence[Child], launch: RayLaunch) -> dict[Shard, int]:
    """Every child as a Ray task at once; their exit codes (EXIT_LOST: Ray gave the task up).

    Cancelled (Ctrl-C, SIGTERM): the tasks are cancelled and their children stopped before it returns.
    """
    import ray

    task = ray.remote(run_shard).options(
        num_cpus=1, num_gpus=launch.gpus, max_retries=RETRIES, retry_exceptions=False
    )
    cwd = os.getcwd()
    refs = {
        task.remote(child.command[1:], str(child.log), cwd, str(child.shard)): child for child in children
    }
    codes: dict[Shard, int] = {}
    pending = list(refs)
    try:
        while pending:
            # Polled without blocking: ray.wait in a thread could not be cancelled by Ctrl-C or SIGTERM.
            done, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
            for ref in done:
                codes[refs[ref].shard] = _exit_code(ref, refs[ref])
            if pending:
                await anyio.sleep(POLL_S)
    finally:
        if pending:
            with anyio.CancelScope(shield=True):
                await _cancel(pending)
    return codes


def _exit_code(ref: Any, child: Child) -> int:
    """A finished task's exit code; a task Ray gave up on is noted in its shard's log (EXIT_LOST)."""
    import ray

    try:
        return int(ray.get(ref))
    except ray.exceptions.RayError as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        with child.log.open("a", encoding="utf-8") as log:
            log.write(
                f"ray: Ray gave the task up ({RETRIES} retries allowed): {first} (rerun with --resume)\n"
            )
        return EXIT_LOST


async def _cancel(pending: list[Any]) -> None:
    """Cancel the tasks and give their children the grace ``--procs`` gives them to stop."""
    import ray

    for ref in pending:
        ray.cancel(ref, force=False)  # KeyboardInterrupt in the task: it stops its child with SIGTERM
    deadline = time.monotonic() + GRACE_S + 5
    while pending and time.monotonic() < deadline:
        _, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
        await anyio.sleep(POLL_S)


def run_shard(args: list[str], log: str, cwd: str, shard: str) -> int:
    """In a Ray worker: one shard's ``paragen eval`` as a child process of this worker; its exit code.

    ``args`` follow the Python executable, which is this worker's own: the one every node runs Ray
    (and paragen) with. The child runs in the parent's working directory (a shared filesystem), so
    relative paths in its options mean what they meant to the parent.
    """
    import ray

    out = Path(args[args.index("--out") + 1])
    _wait_for_folder(out)
    node = ray.get_runtime_context().get_node_id()
    with open(log, "ab") as sink:
        header = HEADER.format(shard=shard, node=node, pid=os.getpid(), host=socket.gethostname())
        sink.write(f"{header}\n".encode())
        sink.flush()
        process = subprocess.Popen(
            [sys.executable, *args],
            cwd=cwd if os.path.isdir(cwd) else None,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, **parent_env()},  # it ends when this worker does (evals.run.orphans)
        )
        try:
            while True:  # in short waits: Ray's cancel raises KeyboardInterrupt between them
                with contextlib.suppress(subprocess.TimeoutExpired):
                    return process.wait(timeout=POLL_S)
        finally:
            _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """A child still running (the task was cancelled): SIGTERM, then a kill after the grace period."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _wait_for_folder(folder: Path) -> None:
    """Until no other process holds the shard folder (a lost attempt's child still stopping), or
    LOCK_WAIT_S; past that the child itself refuses the folder with one line naming the holder."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            with run_folder_lock(folder):
                return
        except FolderLocked:
            if time.monotonic() > deadline:
                return
            time.sleep(0.5)
