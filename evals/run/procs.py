"""`paragen eval --procs P`: one sweep as P shard processes on this machine, then merged.

Each child is ``python -m paragen.cli eval`` with the parent's own options, ``--shard j/P`` and
its own run folder under ``OUT/shards/``; its output goes to a log beside that folder. With
``--shard I/N`` as well, the children are shards ``(I-1)*P + j`` of ``N*P`` and the merge into
``OUT`` holds those P (a partial merge that merges later with the other nodes' folders).

Ending the parent ends the children: on Ctrl-C or SIGTERM each child gets SIGTERM (it records
what it finished and closes its backend), and is killed if it has not exited after a grace
period. ``kill -9`` or a crash of the parent runs no handler, so each child also watches its
parent and ends when it dies (:mod:`evals.run.orphans`). The parent holds ``OUT``'s lock and
each child its shard folder's (:mod:`evals.run.lock`): a second sweep on the same folders is
refused while any of them lives. Children that ended with a result (exit 0), or with records
that are not all results (1: no result, 3: some runs raised) are merged; any other exit stops
the parent before the merge, naming the child and the last line of its log.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio

from evals.run.orphans import parent_env
from evals.run.shards import Shard
from paragen.errors import ConfigError

SHARDS_FOLDER = "shards"
GRACE_S = 10.0  # how long a child has to close its backend after SIGTERM before it is killed
MERGEABLE_EXITS = (0, 1, 3)
PROCS_PER_CPU = 4  # --procs at most this many per CPU: each child is a whole eval with its grading pool


def max_procs() -> int:
    """The most shard processes ``--procs`` starts on this machine."""
    return (os.cpu_count() or 1) * PROCS_PER_CPU


def check_procs(procs: int | None, *, here: bool = True) -> None:
    """``--procs`` refused in one line when it is not positive or (``here``: run on this machine)
    more than this machine can run."""
    if procs is None:
        return
    if procs < 1:
        raise ConfigError(f"bad --procs {procs}: it must be at least 1")
    if here and procs > max_procs():
        raise ConfigError(
            f"bad --procs {procs}: this machine runs at most {max_procs()} "
            f"({PROCS_PER_CPU} per CPU, {os.cpu_count() or 1} CPUs)",
            hint="run more shards on other machines: --shard I/N, then paragen merge",
        )


@dataclass(frozen=True)
class Child:
    """One shard process: its shard, run folder, log and command line."""

    shard: Shard
    out: Path
    log: Path
    command: list[str]


def plan_children(options: Sequence[str], out: Path, procs: int, outer: Shard | None) -> list[Child]:
    """The P children of ``--procs``: ``options`` are the parent's eval options without
    ``--out``, ``--procs``, ``--shard``, progress and plot (each child gets its own)."""
    base = SHARDS_FOLDER
    outer = outer or Shard(1, 1)
    children = []
    for j in range(1, procs + 1):
        shard = Shard((outer.index - 1) * procs + j, outer.count * procs)
        folder = out / base / f"{shard.index}-of-{shard.count}"
        command = [sys.executable, "-m", "paragen.cli", "eval", *options, "--shard", str(shard)]
        command += ["--out", str(folder), "--no-progress", "--no-plot"]
        children.append(Child(shard, folder, folder.with_suffix(".log"), command))
    return children


async def run_children(children: Sequence[Child]) -> dict[Shard, int]:
    """Run every child at once; their exit codes. Cancelled (Ctrl-C, SIGTERM): the children end too."""
    codes: dict[Shard, int] = {}

    async def one(child: Child) -> None:
        codes[child.shard] = await _run_child(child)

    async with anyio.create_task_group() as group:
        for child in children:
            group.start_soon(one, child)
    return codes


async def _run_child(child: Child) -> int:
    child.log.parent.mkdir(parents=True, exist_ok=True)
    with child.log.open("ab") as log:
        process = await anyio.open_process(
            child.command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **parent_env()},
        )
        try:
            return await process.wait()
        finally:
            if process.returncode is None:  # cancelled: ask it to stop, then make sure it has
                process.terminate()
                with anyio.move_on_after(GRACE_S, shield=True):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    with anyio.CancelScope(shield=True):
                        await process.wait()


def failed_child(children: Sequence[Child], codes: dict[Shard, int]) -> tuple[str, int] | None:
    """A line naming the first child whose exit leaves nothing to merge, and the exit code for the
    parent (2 when the child refused its input; 128 + N when a signal N ended it), or None."""
    for child in children:
        code = codes[child.shard]
        if code not in MERGEABLE_EXITS:
            line = f"shard {child.shard} exited {code}: {last_line(child.log)} (log: {child.log})"
            return line, 128 - code if code < 0 else code
    return None


def last_line(log: Path) -> str:
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return lines[-1] if lines else "no output"
