"""The error matrix on the real engine (a tiny random-init Llama): a subset of strategies, composites
included, x {budget hit on the first sample, deadline mid-run, every request failing, a failure
mid-stream} ends in a StrategyResult with the right stop_reason, and the engine's cache is whole after.

The engine generates for real; the faults come from a wrapper over it (the engine itself has no fault
injection): it fails a stream as it opens, or after two deltas (leaving the stream aborts the
engine's sequence, as any failure does), or slows each delta so a deadline lands mid-run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from paragen import Orchestrator, Problem
from paragen.backends.base import CompletionStream
from paragen.backends.engine import EngineBackend
from paragen.backends.wrappers import WrapperBackend
from paragen.config import Budget
from paragen.errors import EngineError
from paragen.strategy import build_strategy
from paragen.types import Delta, GenerateRequest, SamplingParams, StrategyResult

pytestmark = pytest.mark.anyio

PROBLEM = Problem(id="p", question="What is 2 + 3?", gold="5")
BUDGETS = {
    "budget": Budget(max_total_tokens=3),
    "deadline": Budget(deadline_s=0.3),
    "fail_all": Budget(),
    "fail_mid": Budget(),
}
STRATEGIES: dict[str, tuple[str, dict[str, Any]]] = {
    "single": ("single", {}),
    "majority": ("majority", {"n": 3}),
    "ffs": ("ffs", {"n": 3}),
    "pdr+majority": ("pdr", {"draft_strategy": "majority", "parallelism": (2, 1)}),
    "deepprune+llm": ("deepprune", {"judge": "llm", "n": 3}),
}


class Faulty(WrapperBackend):
    """The engine, with one fault: ``open`` (fails as it opens), ``mid`` (after 2 deltas) or ``slow``."""

    def __init__(self, inner: EngineBackend, fault: str | None) -> None:
        super().__init__(inner)
        self.fault = fault

    def stream(self, request: GenerateRequest) -> AbstractAsyncContextManager[CompletionStream]:
        return self._stream(request)

    @asynccontextmanager
    async def _stream(self, request: GenerateRequest) -> AsyncIterator[CompletionStream]:
        if self.fault == "open":
            raise EngineError("injected: the engine refused the request")
        async with self.inner.stream(request) as stream:
            yield _Bent(stream, self.fault)


class _Bent:
    def __init__(self, inner: CompletionStream, fault: str | None) -> None:
        self._inner, self._fault = inner, fault
        self.usage = inner.usage

    async def abort(self, index: int) -> None:
        await self._inner.abort(index)

    def __aiter__(self) -> AsyncIterator[Delta]:
        return self._deltas()

    async def _deltas(self) -> AsyncIterator[Delta]:
        count = 0
        async for delta in self._inner:
            count += 1
            if self._fault == "mid" and count > 2:
                raise EngineError("injected: the engine failed mid-stream")
            if self._fault == "slow":
                await anyio.sleep(0.01)
            yield delta


@pytest.fixture(scope="module")
def engine_backend(tiny_llama: Path) -> Iterator[EngineBackend]:
    backend = EngineBackend.from_spec(str(tiny_llama), dtype="float32", num_blocks=256, block_size=8)
    yield backend
    anyio.run(backend.aclose)


async def run(backend: EngineBackend, name: str, scenario: str) -> StrategyResult:
    fault = {"deadline": "slow", "fail_all": "open", "fail_mid": "mid"}.get(scenario)
    orch = Orchestrator(
        Faulty(backend, fault),
        defaults=SamplingParams(max_tokens=48, temperature=1.0, seed=0),
        budget=BUDGETS[scenario],
    )
    base, options = STRATEGIES[name]
    return await orch.run(build_strategy(base, options), PROBLEM)


@pytest.mark.parametrize("scenario", list(BUDGETS))
@pytest.mark.parametrize("name", list(STRATEGIES))
async def test_engine_runs_end_in_a_result(engine_backend: EngineBackend, name: str, scenario: str) -> None:
    free = engine_backend.engine.num_free_blocks
    result = await run(engine_backend, name, scenario)
    # A failing backend: every strategy here keeps its failed samples as error traces and finishes
    # without an answer ("done": the run did not fail, its samples did).
    expected = scenario if scenario in ("budget", "deadline") else "done"
    assert (result.stop_reason, result.answer) == (expected, None), result.error
    assert result.traces and all(t.end is not None for t in result.traces)
    assert result.usage.total_tokens == sum(t.completion_tokens for t in result.traces)
    if scenario.startswith("fail"):
        assert any(t.status == "error" and "injected" in (t.error or "") for t in result.traces)
    assert engine_backend.engine.num_free_blocks == free  # every aborted sequence gave its cache back


@pytest.mark.parametrize("scenario", ["budget", "deadline"])
async def test_hogwild_on_the_engine_ends_in_a_result(engine_backend: EngineBackend, scenario: str) -> None:
    defaults = SamplingParams(max_tokens=400, seed=0)
    if scenario == "deadline":
        # The tiny model's run ends by itself in a fraction of a second (after 26 passes here), so a
        # fixed deadline would race it: the deadline is a quarter of this machine's own unbounded run.
        unbounded = Orchestrator(engine_backend, defaults=defaults)
        full = await unbounded.run(build_strategy("hogwild", {"workers": 2}), PROBLEM)
        assert full.stop_reason == "done"
        limit = Budget(deadline_s=full.usage.latency_s / 4)
    else:
        limit = Budget(max_total_tokens=3)
    orch = Orchestrator(engine_backend, defaults=defaults, budget=limit)
    result = await orch.run(build_strategy("hogwild", {"workers": 2}), PROBLEM)
    assert (result.stop_reason, result.answer) == (scenario, None)
    assert result.usage.total_tokens == sum(t.completion_tokens for t in result.traces)
