"""Shared-cache sessions through the engine backend: the protocol, the step thread, cancellation, leaks."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import anyio
import pytest

from paragen.backends.base import (
    SharedRow,
    SharedSample,
    SharedSession,
    SharedSessionBackend,
    generate,
)
from paragen.backends.engine import EngineBackend
from paragen.engine.hogwild import batch
from paragen.engine.hogwild.batch import SharedForward
from paragen.errors import EngineError
from paragen.types import GenerateRequest, SamplingParams

pytestmark = pytest.mark.anyio
GREEDY = SamplingParams(max_tokens=24, temperature=0.0)


@pytest.fixture
async def backend(tiny_llama: Path) -> AsyncIterator[EngineBackend]:
    b = EngineBackend.from_spec(str(tiny_llama), dtype="float32", num_blocks=64, block_size=4)
    yield b
    await b.aclose()


@pytest.fixture
def batch_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many sessions' jobs each shared forward pass held, in order."""
    sizes: list[int] = []
    real_forward = batch.forward_together

    def counted(jobs: Sequence[SharedForward]) -> list[list[SharedSample] | EngineError]:
        sizes.append(len(jobs))
        return real_forward(jobs)

    monkeypatch.setattr(batch, "forward_together", counted)
    return sizes


async def test_capability_and_protocol(backend: EngineBackend) -> None:
    assert backend.capabilities.shared_cache
    assert isinstance(backend, SharedSessionBackend)
    async with backend.shared_session(GREEDY, num_workers=2) as session:
        assert isinstance(session, SharedSession)
        assert session.detokenize(session.tokenize("Hello there")) == "Hello there"
        assert "Hi" in session.apply_chat_template([{"role": "user", "content": "Hi"}])
        assert backend.engine.tokenizer.eos_token_id in session.eos_token_ids


async def test_one_worker_equals_plain_greedy_with_requests_alongside(backend: EngineBackend) -> None:
    """n = 1 over [prompt, own] equals plain greedy decoding while a plain request runs on the same thread."""
    request = GenerateRequest(prompt="Once upon a time, in a small village,", params=GREEDY)
    plain = (await generate(backend, request))[0].token_ids
    assert plain is not None
    prompt = backend.prompt_ids(request)
    out: list[int] = []

    async def worker() -> None:
        async with backend.shared_session(GREEDY, num_workers=1) as session:
            p, own = await session.new_segment(), await session.new_segment()
            out.append((await session.forward([SharedRow(0, [p], prompt)], greedy=True))[0].token_id)
            while len(out) < len(plain):
                rows = [SharedRow(0, [p, own], [out[-1]])]
                out.append((await session.forward(rows, greedy=True))[0].token_id)
            assert session.segment_length(own) == len(plain) - 1

    async with anyio.create_task_group() as tg:
        tg.start_soon(worker)
        tg.start_soon(generate, backend, GenerateRequest(prompt="Hello", params=GREEDY, n=3))
    assert out == plain
    assert backend.engine.num_free_blocks == 64


async def test_suppressed_tokens_are_never_sampled(backend: EngineBackend) -> None:
    params = GREEDY.model_copy(update={"logprobs": True})
    async with backend.shared_session(params, num_workers=1) as session:
        p = await session.new_segment()
        ids = session.tokenize("The answer is")
        (free,) = await session.forward([SharedRow(0, [p], ids)], greedy=True)
        await session.free_segment(p)
        p = await session.new_segment()
        (held,) = await session.forward(
            [SharedRow(0, [p], ids)], greedy=True, suppress_token_ids=[free.token_id]
        )
        assert held.token_id != free.token_id and held.logprob is not None and held.logprob <= 0.0


async def test_leaving_by_error_frees_every_block(backend: EngineBackend) -> None:
    with pytest.raises(EngineError, match="two rows write"):
        async with backend.shared_session(GREEDY, num_workers=2) as session:
            a, b = await session.new_segment(), await session.new_segment()
            await session.forward([SharedRow(0, [a], session.tokenize("one two three four five six"))])
            assert backend.engine.num_free_blocks < 64
            await session.forward([SharedRow(0, [a], [1]), SharedRow(1, [b, a], [2])])
    assert backend.engine.num_free_blocks == 64


async def test_cancelling_mid_forward_frees_every_block(
    backend: EngineBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller is cancelled while its forward runs on the step thread; leaving still frees it all."""
    started, release = threading.Event(), threading.Event()
    finished: list[bool] = []
    real_forward = batch.forward_together

    def slow_forward(jobs: Sequence[SharedForward]) -> list[list[SharedSample] | EngineError]:
        started.set()
        release.wait(5.0)  # hold the pass open until the caller has been cancelled
        samples = real_forward(jobs)
        finished.append(True)
        return samples

    monkeypatch.setattr(batch, "forward_together", slow_forward)

    async def session_body() -> None:
        async with backend.shared_session(GREEDY, num_workers=1) as session:
            p = await session.new_segment()
            await session.forward([SharedRow(0, [p], session.tokenize("a long prompt " * 8))])

    async with anyio.create_task_group() as tg:
        tg.start_soon(session_body)
        assert await anyio.to_thread.run_sync(started.wait, 30.0)
        tg.cancel_scope.cancel()
        release.set()
    assert finished == [True]  # the pass had begun and wrote its blocks
    assert backend.engine.num_free_blocks == 64


async def test_closed_session_and_engine_refuse(backend: EngineBackend) -> None:
    async with backend.shared_session(GREEDY, num_workers=1) as session:
        seg = await session.new_segment()
    with pytest.raises(EngineError, match="closed"):
        await session.forward([SharedRow(0, [seg], [1])])
    await backend.aclose()
    with pytest.raises(EngineError, match="closed"):
        await session.new_segment()


async def _two_workers(backend: EngineBackend, prompt: str, num_tokens: int) -> list[list[int]]:
    """Two greedy workers, each seeing the prompt, the other's tokens and then its own."""
    async with backend.shared_session(GREEDY, num_workers=2) as session:
        p, own = await session.new_segment(), [await session.new_segment(), await session.new_segment()]
        (first,) = await session.forward([SharedRow(0, [p], session.tokenize(prompt))], greedy=True)
        out = [[first.token_id], [first.token_id]]
        while len(out[0]) < num_tokens:
            rows = [SharedRow(w, [p, own[1 - w], own[w]], [out[w][-1]]) for w in (0, 1)]
            for w, sample in enumerate(await session.forward(rows, greedy=True)):
                out[w].append(sample.token_id)
        return out


async def test_concurrent_sessions_share_forward_passes(
    backend: EngineBackend, batch_sizes: list[int]
) -> None:
    prompts = ["Once upon a time", "The capital of France is", "def main():"]
    alone = [await _two_workers(backend, prompt, 10) for prompt in prompts]
    assert batch_sizes == [1] * 30
    batch_sizes.clear()
    together: dict[str, list[list[int]]] = {}

    async def run(prompt: str) -> None:
        together[prompt] = await _two_workers(backend, prompt, 10)

    async with anyio.create_task_group() as tg:
        for prompt in prompts:
            tg.start_soon(run, prompt)
    assert [together[prompt] for prompt in prompts] == alone
    # Passes were shared: about a third as many passes as forwards (the bound leaves room for noise).
    assert sum(batch_sizes) == 30 and len(batch_sizes) <= 20, batch_sizes
    assert backend.engine.num_free_blocks == 64


async def test_batched_calls_give_each_caller_its_own_outcome(backend: EngineBackend) -> None:
    batches: list[list[int]] = []

    def double(items: list[int]) -> list[int | EngineError]:
        batches.append(items)
        return [EngineError(f"bad item {i}") if i < 0 else 2 * i for i in items]

    def broken(items: list[int]) -> list[int | EngineError]:
        raise ValueError("the whole batch failed")

    outcomes: dict[tuple[str, int], object] = {}

    async def one(fn: Callable[[list[int]], list[int | EngineError]], item: int) -> None:
        try:
            value: int = await backend.runtime.call_batched(fn, item)
            outcomes[fn.__name__, item] = value
        except EngineError as exc:
            outcomes[fn.__name__, item] = str(exc)

    async with anyio.create_task_group() as tg:
        for fn, item in [(double, 1), (double, -1), (double, 3), (broken, 5)]:
            tg.start_soon(one, fn, item)
    assert outcomes == {
        ("double", 1): 2,
        ("double", -1): "bad item -1",
        ("double", 3): 6,
        ("broken", 5): "engine call failed: ValueError('the whole batch failed')",
    }
    assert sorted(i for batch in batches for i in batch) == [-1, 1, 3]


async def test_a_session_at_a_step_boundary_still_makes_the_pass(
    backend: EngineBackend, batch_sizes: list[int]
) -> None:
    """A session that folds a step (three calls: append, free, new segment) before every other pass
    joins the others' pass: the engine runs its calls while the batch waits (each was a pass late)."""

    async def run(prompt: str, fold: bool) -> None:
        async with backend.shared_session(GREEDY, num_workers=1) as session:
            history, step = await session.new_segment(), await session.new_segment()
            (sample,) = await session.forward([SharedRow(0, [step], session.tokenize(prompt))])
            for n in range(12):
                if fold and n % 2:
                    await session.append_from(history, step)
                    await session.free_segment(step)
                    step = await session.new_segment()
                (sample,) = await session.forward([SharedRow(0, [history, step], [sample.token_id])])

    async with anyio.create_task_group() as tg:
        for i, prompt in enumerate(["Once upon a time", "The capital of France is", "def main():"]):
            tg.start_soon(run, prompt, i == 0)
    # 39 forwards; in lockstep 13 passes (the folding session must not fall a pass behind at each fold)
    assert sum(batch_sizes) == 39 and len(batch_sizes) <= 15, batch_sizes
    assert backend.engine.num_free_blocks == 64


async def test_logprobs_come_when_the_params_ask_for_them(backend: EngineBackend) -> None:
    found = []
    for asked in (False, True):
        params = GREEDY.model_copy(update={"logprobs": asked})
        async with backend.shared_session(params, num_workers=1) as session:
            p = await session.new_segment()
            (sample,) = await session.forward([SharedRow(0, [p], session.tokenize("The answer is"))])
            found.append(sample.logprob)
    assert found[0] is None and found[1] is not None and found[1] <= 0.0
