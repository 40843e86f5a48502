"""A sweep on the real engine (SmolLM2 on CPU, a fixed seed) run whole and as 3 shards merged.

One problem at a time (``max_concurrent=1``): the engine's bf16 numerics depend on which
requests share a batch, and sharding changes which problems run side by side; one at a time,
a problem's batch is its own samples whether the sweep is whole or split.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from evals.run.combos import build_combos
from evals.run.merge import merge_shards
from evals.run.records import RECORDS_FILE, EvalRecord, read_records
from evals.run.runner import run_eval
from evals.run.shards import Shard
from evals.run.spec import BackendSetup, EvalSpec, Execution, RunFolder, Sampling
from evals.tasks import Selection, get_task, load_task
from paragen.backends.base import Backend
from paragen.cli_options import choose_backend
from paragen.errors import ConfigError
from paragen.types import SamplingParams

pytest.importorskip("torch")
# Model loads and runs on 2 shared cores: minutes under load, not the suite default.
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(1200)]


def _spec(out: Path, shard: Shard | None, *, resume: bool = False) -> EvalSpec:
    task = get_task("arith")
    loaded = load_task(task, Selection(limit=3))
    return EvalSpec(
        task=task,
        problems=loaded.problems,
        data=loaded.source,
        combos=build_combos(["single", "majority"], [2]),
        backend=BackendSetup("engine"),
        folder=RunFolder(out, resume=resume),
        sampling=Sampling(SamplingParams(max_tokens=16, temperature=0.7, seed=7)),
        execution=Execution(max_concurrent=1, progress=False, shard=shard),
    )


def _essence(records: list[EvalRecord]) -> list[tuple[Any, ...]]:
    """What sharding must not change: keys, every sampled text, answers, grades, tokens."""
    return sorted(
        (
            r.key,
            tuple(trace.text for trace in r.result.traces),
            r.result.answer,
            r.grade.outcome,
            r.result.usage.total_tokens,
        )
        for r in records
    )


async def _run_until_first_record(spec: EvalSpec, backend: Backend) -> None:
    """Run ``spec`` and cancel it once its first record is on disk (a shard stopped mid-run)."""
    async with anyio.create_task_group() as group:
        group.start_soon(run_eval, spec, backend)
        # Polled: the record is written by the sweep's own writer, which offers no event to wait on.
        while not (spec.folder.path / RECORDS_FILE).is_file() or not read_records(spec.folder.path):  # noqa: ASYNC110
            await anyio.sleep(0.01)
        group.cancel_scope.cancel()


# asyncio only: what trio changes (cancellation, streams) its own tests cover at a fraction of this cost.
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_three_shards_merged_equal_one_whole_run_also_after_a_stop_and_resume(
    tmp_path: Path, smol_dir: Path
) -> None:
    backend = choose_backend("engine", model=None, base_url=None, options=[]).build()
    shards = [tmp_path / f"shard{i}" for i in (1, 2, 3)]
    try:
        whole = await run_eval(_spec(tmp_path / "whole", None), backend)
        for index in (1, 3):
            await run_eval(_spec(shards[index - 1], Shard(index, 3)), backend)
        await _run_until_first_record(_spec(shards[1], Shard(2, 3)), backend)
        assert len(read_records(shards[1])) == 1  # of its 2 units

        with pytest.raises(ConfigError, match="shard2 is not finished: 1 of 2 problems have no record"):
            merge_shards(tmp_path / "merged", shards)
        assert not (tmp_path / "merged").exists()

        await run_eval(_spec(shards[1], Shard(2, 3), resume=True), backend)
    finally:
        await backend.aclose()
    merge_shards(tmp_path / "merged", shards)
    merged = read_records(tmp_path / "merged")
    assert len(whole) == len(merged) == 3 * 2  # 3 problems x (single, majority n=2)
    assert _essence(merged) == _essence(whole)
    assert all(len(r.result.traces) == r.n for r in merged)
