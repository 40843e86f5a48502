"""`paragen merge OUT SHARD...`: one run folder from the shards of a sweep (see :mod:`evals.run.shards`).

The shards are checked before anything is written: each holds a shard's run.json whose
sweep fingerprint still matches its settings, data, configurations, problems and seeds; all
name the same sweep and shard count; no shard is given twice; each holds exactly the units
it owns (a missing one: the shard is not finished, ``--resume`` it; one that another shard
owns: a duplicate). Without ``partial`` every shard of the sweep must be given; with it a
subset is merged, and the result, itself a shard folder holding several indices, merges
later with the rest: shards are merged as they finish.

``OUT`` must be new or empty: a folder holding anything else (records of another run, say) is
refused, as ``paragen eval`` refuses it. The merge holds ``OUT``'s lock and each shard folder's
while it works (:mod:`evals.run.lock`), so a shard still being written, or a second merge into
the same folder, is refused. The merged files are written whole into a temporary folder beside
``OUT`` and renamed into place, run.json last: a folder without run.json is never a finished run,
and a failed merge leaves ``OUT`` as it found it. Its records are the shards' records, in the
order one process would have written them, under the merged run's id (its run.json lists
the shards' run ids); ``paragen report`` reads it like any run folder.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from evals.run.lock import is_empty, run_folder_lock
from evals.run.records import (
    RECORDS_FILE,
    RUN_FILE,
    EvalRecord,
    Key,
    RunInfo,
    ShardInfo,
    load_records,
    read_run_info,
    write_run_info,
)
from evals.run.shards import shard_units, sweep_fingerprint
from paragen.errors import ConfigError


@dataclass(frozen=True)
class ShardFolder:
    """A shard's run folder as read and checked: its run info and its records by key."""

    path: Path
    info: RunInfo
    shard: ShardInfo
    records: dict[Key, EvalRecord]


def read_shard(path: Path) -> ShardFolder:
    """A shard folder, checked on its own: a shard's run.json whose fingerprint still holds."""
    if not (path / RUN_FILE).is_file():
        raise ConfigError(
            f"{path} holds no {RUN_FILE}", hint="give the --out folders of `paragen eval --shard`"
        )
    info = read_run_info(path)
    if info.shard is None:
        raise ConfigError(f"{path} is not a shard", hint="run the sweep with --shard I/N to merge it")
    if info.earlier:
        raise ConfigError(
            f"{path} holds more than one run (--new-run)", hint="merge folders that hold one run each"
        )
    if sweep_fingerprint(info) != info.shard.sweep:
        raise ConfigError(
            f"{path} was continued with another sweep than its shard's {info.shard.sweep}",
            hint="re-run that shard into a new folder",
        )
    records = {r.key: r for r in load_records(path).latest()}
    return ShardFolder(path, info, info.shard, records)


def check_shards(shards: Sequence[ShardFolder], *, partial: bool) -> list[int]:
    """The shard indices the folders hold, sorted; one ConfigError line for whatever does not fit."""
    first = shards[0]
    seen: dict[int, Path] = {}
    for shard in shards:
        if (shard.shard.sweep, shard.shard.count) != (first.shard.sweep, first.shard.count):
            raise ConfigError(
                f"{shard.path} is shard of sweep {shard.shard.sweep} in {shard.shard.count}, "
                f"{first.path} of sweep {first.shard.sweep} in {first.shard.count}: not the same sweep",
                hint="merge the shards of one sweep (same settings, problems, seeds and --shard N)",
            )
        for index in shard.shard.indices:
            if index in seen:
                raise ConfigError(
                    f"shard {index}/{shard.shard.count} is given twice: {seen[index]} and {shard.path}"
                )
            seen[index] = shard.path
    missing = sorted(set(range(1, first.shard.count + 1)) - set(seen))
    if missing and not partial:
        raise ConfigError(
            f"{len(missing)} of the sweep's {first.shard.count} shards are missing: {_numbers(missing)}",
            hint="give every shard's folder, or pass --partial to merge these now and the rest later",
        )
    return sorted(seen)


def shard_records(shard: ShardFolder) -> list[EvalRecord]:
    """The shard's records in run order; one ConfigError line when a unit is missing or foreign."""
    owned = shard_units(shard.info, shard.shard.indices, shard.shard.count)
    missing = [key for key in owned if key not in shard.records]
    if missing:
        _, problem, strategy, n, _, seed = missing[0]
        raise ConfigError(
            f"{shard.path} is not finished: {len(missing)} of {len(owned)} problems have no record "
            f"(first: {problem} under {strategy} n={n}, seed {seed})",
            hint="continue that shard with the same command and --resume, then merge",
        )
    foreign = set(shard.records) - set(owned)
    if foreign:
        _, problem, strategy, n, _, _ = sorted(foreign)[0]
        raise ConfigError(
            f"{shard.path} holds {len(foreign)} records of problems it does not own "
            f"(first: {problem} under {strategy} n={n}): a duplicate of another shard's or another sweep's",
            hint="merge folders written by `paragen eval --shard` alone",
        )
    return [shard.records[key] for key in owned]


def merge_shards(
    out: Path | str, folders: Sequence[Path | str], *, partial: bool = False, replace: bool = False
) -> RunInfo:
    """Merge shard folders into the run folder ``out`` (new or empty), written whole or not at all.

    ``replace``: ``out`` is a ``--procs`` parent's folder, which holds its shards and whose lock
    the caller holds; its records and run.json are replaced.
    """
    target, paths = _paths(out, folders)
    with ExitStack() as held:
        if not replace:
            _refuse_occupied(target)  # before the lock file is made: a refused merge leaves it as it was
            held.enter_context(run_folder_lock(target))
            _refuse_occupied(target)
        # Each folder locked once: a folder given twice is refused below as a shard given twice,
        # where a second lock of it would name this very merge as the folder's writer.
        for path in dict.fromkeys(p.resolve() for p in paths if p.is_dir()):
            held.enter_context(run_folder_lock(path))  # no shard is read while it is written
        info, lines = _merged(paths, partial=partial)
        _write_whole(target, info, lines)
    return info


def _refuse_occupied(out: Path) -> None:
    """``out`` refused unless it is new or empty, as ``paragen eval`` refuses a folder with records."""
    if is_empty(out):
        return
    holds = "a run" if (out / RUN_FILE).exists() else "records" if (out / RECORDS_FILE).exists() else "files"
    raise ConfigError(f"{out} already holds {holds}", hint="merge into a new or empty folder")


def _paths(out: object, folders: object) -> tuple[Path, list[Path]]:
    """The merge's folders as paths; one ConfigError line for anything that is not a path."""
    if not isinstance(out, str | os.PathLike):
        raise ConfigError(f"the merged run folder must be a path, not {type(out).__name__}")
    if isinstance(folders, str | os.PathLike) or not isinstance(folders, Sequence):
        raise ConfigError(
            "the shard folders must be a list of paths", hint="merge_shards(OUT, [SHARD_DIR, ...])"
        )
    if not folders:
        raise ConfigError("no shard folders given", hint="paragen merge OUT SHARD_DIR...")
    wrong = [f for f in folders if not isinstance(f, str | os.PathLike)]
    if wrong:
        raise ConfigError(f"a shard folder must be a path, not {type(wrong[0]).__name__}")
    return Path(out), [Path(f) for f in folders]


def _merged(folders: Sequence[Path], *, partial: bool) -> tuple[RunInfo, list[str]]:
    """The merged run's info and its records' lines, in the order one process would write them."""
    shards = [read_shard(path) for path in folders]
    indices = check_shards(shards, partial=partial)
    shards.sort(key=lambda shard: min(shard.shard.indices))
    by_position = {
        key: record
        for shard in shards
        for key, record in zip(
            shard_units(shard.info, shard.shard.indices, shard.shard.count), shard_records(shard), strict=True
        )
    }
    info = merged_info(shards, indices)
    order = shard_units(info, indices, info.shard.count if info.shard else 1)
    return info, [by_position[key].model_copy(update={"run_id": info.run_id}).to_line() for key in order]


def merged_info(shards: Sequence[ShardFolder], indices: list[int]) -> RunInfo:
    """The merged run's info: the sweep's (from its first shard), the shards' times and run ids."""
    first = shards[0]
    sweep = first.shard.sweep
    shard = ShardInfo(
        sweep=sweep, count=first.shard.count, indices=indices, runs=[run for s in shards for run in _runs(s)]
    )
    return first.info.model_copy(
        update={
            "run_id": _merged_run_id(sweep, indices),
            "started_at": min(s.info.started_at for s in shards),
            "resumed_at": sorted(t for s in shards for t in s.info.resumed_at),
            "metrics": {},  # counters of separate processes: each shard's run.json keeps its own
            "shard": shard,
        }
    )


def _merged_run_id(sweep: str, indices: list[int]) -> str:
    """The same for every merge of the same shards: a re-merge after a resume keeps its id."""
    return hashlib.sha256(f"{sweep}:{indices}".encode()).hexdigest()[:12]


def _runs(shard: ShardFolder) -> list[str]:
    return shard.shard.runs or [shard.info.run_id]


def _write_whole(out: Path, info: RunInfo, lines: list[str]) -> None:
    """Write the run's files beside ``out`` and rename them into it, run.json last (``out`` holds
    its lock file, and the shards of ``--procs``)."""
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.merging-"))
    try:
        with (staging / RECORDS_FILE).open("w", encoding="utf-8") as handle:
            handle.writelines(lines)
            handle.flush()
            os.fsync(handle.fileno())
        write_run_info(staging, info)
        # A folder with records but no run.json is never a finished run.
        (out / RUN_FILE).unlink(missing_ok=True)
        os.replace(staging / RECORDS_FILE, out / RECORDS_FILE)
        os.replace(staging / RUN_FILE, out / RUN_FILE)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _numbers(values: list[int]) -> str:
    return ",".join(str(v) for v in values)
