"""On the engine (SmolLM2), a cancel that stops many samples costs one step: every sequence it
stops is aborted at the same engine step, whether they are choices of one shared request or
requests of their own, and FFS-k never lets a sample end "ok" after its decision."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from paragen import Orchestrator, Problem, RunContext, StrategyResult
from paragen.backends.engine import EngineBackend
from paragen.events import Note
from paragen.strategy import BaseStrategy, StrategyConfig
from paragen.types import GenerateRequest, SamplingParams
from strategies.ffs import FFS

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
PROBLEM = Problem(id="p", question="What is 7 + 5?")
PARAMS = SamplingParams(max_tokens=64, temperature=0.8, seed=3)


class AbortLog:
    """The engine step at which each sequence was aborted (wraps the engine's ``abort``)."""

    def __init__(self, backend: EngineBackend) -> None:
        engine = backend.engine
        self.steps: dict[int, int] = {}
        inner = engine.abort

        def abort(seq_id: int) -> bool:
            aborted = inner(seq_id)
            if aborted:
                self.steps[seq_id] = engine.num_steps
            return aborted

        engine.abort = abort  # type: ignore[method-assign]


@pytest.fixture
async def smol(smol_dir: Path) -> AsyncIterator[tuple[EngineBackend, AbortLog]]:
    backend = EngineBackend.from_spec(str(smol_dir), threads=1, kv_cache_mb=64)
    yield backend, AbortLog(backend)
    await backend.aclose()


class CancelAtCheckpoint(BaseStrategy[StrategyConfig]):
    """n samples; the first to reach 4 tokens cancels them all (every one is still running)."""

    name = "cancel_at_checkpoint"

    def __init__(self, n: int, *, separate: bool) -> None:
        super().__init__()
        self.n, self.separate = n, separate

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        if self.separate:  # distinct requests, each its own stream
            request: Any = [chat(ctx, f"{problem.question} ({i})") for i in range(self.n)]
            n = None
        else:  # one request of n choices, one stream
            request, n = chat(ctx, problem.question), self.n
        async with ctx.fanout(request, n=n, checkpoint=4) as fan:
            async for _ in fan:
                await fan.cancel("enough")
                break
        return ctx.finish(None)


def chat(ctx: RunContext, question: str) -> GenerateRequest:
    return ctx.request(messages=[{"role": "user", "content": f"Explain step by step: {question}"}])


@pytest.mark.parametrize("separate", [False, True], ids=["choices", "requests"])
async def test_a_cancel_aborts_every_sibling_in_one_engine_step(
    smol: tuple[EngineBackend, AbortLog], separate: bool
) -> None:
    backend, log = smol
    result = await Orchestrator(backend, defaults=PARAMS).run(
        CancelAtCheckpoint(8, separate=separate), PROBLEM
    )
    cancelled = [t for t in result.traces if t.cancel_reason == "enough"]
    assert len(cancelled) == 8 and len(log.steps) == 8, [(t.status, t.text) for t in result.traces]
    assert len(set(log.steps.values())) == 1, log.steps
    assert backend.engine.num_free_blocks == backend.engine.blocks.num_blocks  # every cache freed


@pytest.mark.parametrize("k", [1, 2])
async def test_ffs_aborts_the_losers_in_one_step_and_none_ends_ok_after_the_decision(
    smol: tuple[EngineBackend, AbortLog], k: int
) -> None:
    backend, log = smol
    decisions: list[float] = []

    def on_event(event: Any) -> None:
        if isinstance(event, Note) and event.message == "ffs: enough finishers":
            decisions.append(event.t)

    orch = Orchestrator(backend, defaults=PARAMS, on_event=on_event)
    result = await orch.run(FFS(n=8, k=k, require_answer=False, max_tokens=160), PROBLEM)
    (decided,) = decisions  # k of 8 samples end before max_tokens (SmolLM2 answers in ~40-120 tokens)
    assert len(set(log.steps.values())) == 1 and len(log.steps) >= 2, log.steps
    late = [t.end for t in result.traces if t.status == "ok" and (t.end or 0) > decided]
    assert not late, (decided, late)
