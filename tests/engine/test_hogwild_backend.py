"""Shared-cache sessions through the engine backend: the protocol, the step thread, cancellation, leaks."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import anyio
import pytest

from paragen.backends.base import (
    SharedCacheBackend,
    SharedCacheSession,
    SharedRow,
    SharedSample,
    generate,
)
from paragen.backends.engine import EngineBackend
from paragen.engine.hogwild import SharedCache
from paragen.errors import EngineError
from paragen.types import GenerateRequest, SamplingParams

pytestmark = pytest.mark.anyio
GREEDY = SamplingParams(max_tokens=24, temperature=0.0)


@pytest.fixture
async def backend(tiny_llama: Path) -> AsyncIterator[EngineBackend]:
    b = EngineBackend.from_spec(str(tiny_llama), dtype="float32", num_blocks=64, block_size=4)
    yield b
    await b.aclose()


async def test_capability_and_protocol(backend: EngineBackend) -> None:
    assert backend.capabilities.shared_cache
    assert isinstance(backend, SharedCacheBackend)
    async with backend.shared_session(GREEDY, num_workers=2) as session:
        assert isinstance(session, SharedCacheSession)
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
    async with backend.shared_session(GREEDY, num_workers=1) as session:
        p = await session.new_segment()
        ids = session.tokenize("The answer is")
        (free,) = await session.forward([SharedRow(0, [p], ids)], greedy=True)
        await session.free_segment(p)
        p = await session.new_segment()
        (held,) = await session.forward(
            [SharedRow(0, [p], ids)], greedy=True, suppress_token_ids=[free.token_id]
        )
        assert held.token_id != free.token_id and held.logprob <= 0.0


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
    real_forward = SharedCache.forward

    def slow_forward(
        self: SharedCache, rows: Sequence[SharedRow], suppress: Sequence[int] = (), greedy: bool = False
    ) -> list[SharedSample]:
        started.set()
        release.wait(5.0)  # hold the pass open until the caller has been cancelled
        samples = real_forward(self, rows, suppress, greedy)
        finished.append(True)
        return samples

    monkeypatch.setattr(SharedCache, "forward", slow_forward)

    async def session_body() -> None:
        async with backend.shared_session(GREEDY, num_workers=1) as session:
            p = await session.new_segment()
            await session.forward([SharedRow(0, [p], session.tokenize("a long prompt " * 8))])

    async with anyio.create_task_group() as tg:
        tg.start_soon(session_body)
        await anyio.to_thread.run_sync(started.wait)
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
