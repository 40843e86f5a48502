"""Shards: one sweep split into N parts that run as separate processes, on any machines.

A sweep's units of work are its (seed, configuration, problem) triples, enumerated in the
order a single process runs them: seed by seed, configuration by configuration, problem by
problem. Shard ``I/N`` (1-based) owns the units whose position ``k`` has ``k % N == I - 1``:
every shard gets an even share of every configuration and seed, and the split depends on
nothing but the sweep itself, so N jobs started anywhere agree on it without talking.

Each shard is an ordinary run folder (records, run.json, ``--resume``) whose run.json also
holds a :class:`~evals.run.records.ShardInfo`: the shard's index, the count, and the sweep's
fingerprint, a hash of everything that defines the sweep (settings, data, configurations,
problems, seeds) and nothing that depends on the shard. ``paragen merge`` (:mod:`evals.run.merge`)
checks the fingerprints agree before it joins shards into one run folder.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from evals.run.records import RUN_FILE, Key, RunInfo, ShardInfo, read_run_info, settings_id
from paragen.errors import ConfigError

_SHARD = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")
SHARD_HINT = "give I/N with 1 <= I <= N, e.g. --shard 2/8"


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (1-based, as ``--shard 2/8`` writes it)."""

    index: int
    count: int

    def owns(self, position: int) -> bool:
        return position % self.count == self.index - 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``"I/N"`` as a Shard; one ConfigError line for anything else (``3/2``, ``0/0``, ``x``)."""
    match = _SHARD.fullmatch(text)
    if match is None:
        raise ConfigError(f"bad --shard {text!r}", hint=SHARD_HINT)
    index, count = int(match[1]), int(match[2])
    if not 1 <= index <= count:
        raise ConfigError(f"bad --shard {text!r}: I must be between 1 and N", hint=SHARD_HINT)
    return Shard(index, count)


def sweep_seeds(info: RunInfo) -> list[int]:
    """The sampling seed of each pass of the sweep, as records key them (-1: no seed)."""
    if info.seeds:
        return list(info.seeds)
    seed = info.settings.sampling.seed
    return [-1 if seed is None else seed]


def sweep_units(info: RunInfo) -> list[Key]:
    """Every record key the sweep of ``info`` makes, in the order one process runs them."""
    task, settings = info.settings.task, info.settings
    return [
        (task, problem, entry.name, entry.n, settings_id(settings, entry.config), seed)
        for seed in sweep_seeds(info)
        for entry in info.strategies
        for problem in info.problems
    ]


def sweep_fingerprint(info: RunInfo) -> str:
    """A hash of what defines the sweep: the same for every shard of it, whatever its index."""
    # Without named backends it hashes as it did before they were recorded (shards then in progress resume).
    unnamed = set() if info.settings.backends else {"backends"}
    blob = {
        "settings": info.settings.model_dump(mode="json", exclude=unnamed),
        "data": info.data.rows_sha256,
        "strategies": [entry.model_dump(mode="json") for entry in info.strategies],
        "problems": info.problems,
        "seeds": sweep_seeds(info),
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


def shard_units(info: RunInfo, indices: list[int], count: int) -> list[Key]:
    """The units of the sweep that shards ``indices`` of ``count`` own, in run order."""
    wanted = {index - 1 for index in indices}
    return [key for position, key in enumerate(sweep_units(info)) if position % count in wanted]


def shard_info(info: RunInfo, shard: Shard) -> ShardInfo:
    return ShardInfo(sweep=sweep_fingerprint(info), count=shard.count, indices=[shard.index])


def check_shard_resume(run_dir: Path, fresh: RunInfo) -> None:
    """Refuse to continue a folder as another part of a sweep than the one it holds.

    A folder that holds every shard of the sweep (a complete merge) continues as the whole sweep.
    """
    if not (run_dir / RUN_FILE).is_file():
        return
    old = read_run_info(run_dir).shard
    new = fresh.shard
    if old == new or (old is not None and new is not None and _same_part(old, new)):
        return
    if new is None and old is not None and _complete(old) and old.sweep == sweep_fingerprint(fresh):
        return
    raise ConfigError(
        f"{run_dir} holds {_describe(old)}, not {_describe(new)}",
        hint="give the same --shard (and sweep) it was started with, or pick a new --out",
    )


def _same_part(old: ShardInfo, new: ShardInfo) -> bool:
    return (old.sweep, old.count, old.indices) == (new.sweep, new.count, new.indices)


def _complete(info: ShardInfo) -> bool:
    return sorted(info.indices) == list(range(1, info.count + 1))


def _describe(info: ShardInfo | None) -> str:
    if info is None:
        return "a whole sweep"
    shards = ",".join(str(i) for i in info.indices)
    return f"shard {shards} of {info.count} of sweep {info.sweep}"
