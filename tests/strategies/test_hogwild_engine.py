"""Hogwild! on the real engine: a tiny random-init Llama (llama3 RoPE scaling) and SmolLM2."""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from paragen.backends.base import SharedSample  # noqa: E402
from paragen.backends.engine import AsyncSharedSession, EngineBackend  # noqa: E402
from paragen.config import Budget  # noqa: E402
from paragen.engine import loader  # noqa: E402
from paragen.orchestrator import Orchestrator  # noqa: E402
from paragen.strategy import Strategy  # noqa: E402
from paragen.types import Problem, SamplingParams, StrategyResult  # noqa: E402
from strategies.hogwild import Hogwild  # noqa: E402
from strategies.single import Single  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
QUESTION = Problem(id="q", question="Tom has 3 apples and buys 4 more. How many apples does he have?")
NUM_BLOCKS = 1024


def _engine_fixtures() -> ModuleType:
    """The engine tests' model builders (tests/engine/conftest.py), reused rather than copied."""
    path = Path(__file__).parents[1] / "engine" / "conftest.py"
    spec = importlib.util.spec_from_file_location("engine_fixtures", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def smol_path() -> Path:
    try:
        loader.default_model_path()
    except Exception as exc:
        pytest.skip(f"default model not installed: {exc}")
    return Path(loader.resolve(None))


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory: pytest.TempPathFactory, smol_path: Path) -> Path:
    return Path(_engine_fixtures()._tiny(tmp_path_factory.mktemp("hogwild"), smol_path, "llama"))


@pytest.fixture
async def tiny(tiny_path: Path) -> AsyncIterator[EngineBackend]:
    backend = EngineBackend.from_spec(str(tiny_path), dtype="float32", num_blocks=NUM_BLOCKS, block_size=4)
    yield backend
    await backend.aclose()


@pytest.fixture(scope="module")
def roomy_path(tmp_path_factory: pytest.TempPathFactory, smol_path: Path) -> Path:
    """The tiny Llama with 4096 positions: three workers run ~1200 passes before its context is full."""
    folder = tmp_path_factory.mktemp("hogwild-roomy")
    return Path(_engine_fixtures()._tiny(folder, smol_path, "llama", max_positions=4096))


async def _run(
    backend: EngineBackend, strategy: Strategy, *, max_tokens: int, budget: Budget | None = None
) -> StrategyResult:
    defaults = SamplingParams(max_tokens=max_tokens, temperature=0.0, seed=0)
    return await Orchestrator(backend, defaults=defaults, budget=budget).run(strategy, QUESTION)


async def _assert_one_worker_is_plain_greedy(backend: EngineBackend, max_tokens: int) -> None:
    plain = await _run(backend, Single(), max_tokens=max_tokens)
    hogwild = await _run(backend, Hogwild(workers=1, stop_at_answer=False), max_tokens=max_tokens)
    (single_trace,) = plain.traces
    worker = hogwild.traces[0]
    assert worker.text == single_trace.text
    assert worker.completion_tokens == single_trace.completion_tokens
    assert worker.prompt_tokens == single_trace.prompt_tokens
    assert backend.engine.num_free_blocks == NUM_BLOCKS


async def test_one_worker_equals_plain_greedy_decoding_on_a_tiny_model(tiny: EngineBackend) -> None:
    await _assert_one_worker_is_plain_greedy(tiny, 40)


# asyncio only: what trio changes (cancellation, streams) its own tests cover at a fraction of this cost.
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_one_worker_equals_plain_greedy_decoding_on_smollm2_in_fp32(smol_path: Path) -> None:
    """Exact in fp32 on every CPU; in bf16 what holds is tests/engine/test_hogwild_one_worker.py's."""
    backend = EngineBackend.from_spec(str(smol_path), dtype="float32", num_blocks=NUM_BLOCKS, block_size=16)
    try:
        await _assert_one_worker_is_plain_greedy(backend, 48)
    finally:
        await backend.aclose()


async def test_two_workers_account_passes_and_free_every_block(tiny: EngineBackend) -> None:
    result = await _run(tiny, Hogwild(workers=2, max_forward_passes=12), max_tokens=64)
    alice, bob, *finisher = result.traces
    assert alice.completion_tokens == bob.completion_tokens == result.metrics["forward_passes"] == 12
    extra = sum(t.completion_tokens for t in finisher)
    assert result.usage.total_tokens == 24 + extra
    assert result.usage.sequential_tokens == 12 + extra
    assert alice.text.startswith("\n\n**Alice [1]:** Hi, I'm Alice.")
    assert tiny.engine.num_free_blocks == NUM_BLOCKS


async def test_a_cancelled_run_frees_every_block(roomy_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The deadline must land while the workers decode. With 512 positions the system prompt leaves
    # room for ~7 passes of 3 workers, which a fast CPU finishes with the finisher inside 0.1 s.
    # Here the context holds ~1200 passes and each is paced to at least 20 ms, so the 0.3 s deadline
    # cuts the run after at most ~15 passes on any CPU (in a pass on the step thread or in the pacing
    # sleep: both must free every block).
    real_forward = AsyncSharedSession.forward

    async def paced_forward(self: AsyncSharedSession, *args: Any, **kwargs: Any) -> list[SharedSample]:
        await anyio.sleep(0.02)
        return await real_forward(self, *args, **kwargs)

    monkeypatch.setattr(AsyncSharedSession, "forward", paced_forward)
    backend = EngineBackend.from_spec(str(roomy_path), dtype="float32", num_blocks=NUM_BLOCKS, block_size=4)
    try:
        result = await _run(backend, Hogwild(workers=3), max_tokens=4000, budget=Budget(deadline_s=0.3))
        assert result.stop_reason == "deadline", result.error
        assert result.traces and all(t.status == "cancelled" for t in result.traces)
        assert backend.engine.num_free_blocks == NUM_BLOCKS
    finally:
        await backend.aclose()


async def test_the_total_budget_stops_the_workers(tiny: EngineBackend) -> None:
    result = await _run(tiny, Hogwild(workers=2), max_tokens=64, budget=Budget(max_total_tokens=10))
    assert result.stop_reason == "budget" and result.usage.total_tokens == 10
    assert tiny.engine.num_free_blocks == NUM_BLOCKS


async def test_a_run_longer_than_the_context_stops_there_and_answers(tiny: EngineBackend) -> None:
    """Before this cap, views grew past the model's positions and the run died with an EngineError."""
    result = await _run(tiny, Hogwild(workers=3), max_tokens=4000)
    assert result.stop_reason == "done" and result.error is None
    workers = [t for t in result.traces if t.meta.get("worker") is not None]
    assert sum(t.completion_tokens for t in workers) < 512 < 3 * 4000
    assert tiny.engine.num_free_blocks == NUM_BLOCKS


async def test_the_reference_protocol_re_encodes_the_flattened_text_for_its_finisher(
    roomy_path: Path,
) -> None:
    # The reference's instructions (a worked example, the ways to collaborate) outgrow 512 positions.
    backend = EngineBackend.from_spec(str(roomy_path), dtype="float32", num_blocks=NUM_BLOCKS, block_size=4)
    try:
        result = await _run(backend, Hogwild(protocol="reference", max_forward_passes=12), max_tokens=64)
        alice, bob, *rest = result.traces
        assert alice.completion_tokens == bob.completion_tokens == 12, result.error
        if result.metrics["finisher"]:  # a random-init model boxes nothing, but never say never
            (finisher,) = rest
            # a fresh prefill: the whole prompt and both workers' text again, not a view's continuation
            assert finisher.prompt_tokens > alice.prompt_tokens + 12
            assert result.usage.sequential_tokens == 12 + finisher.completion_tokens
        assert backend.engine.num_free_blocks == NUM_BLOCKS
    finally:
        await backend.aclose()
