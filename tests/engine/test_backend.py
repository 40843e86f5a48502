"""The "engine" backend through the Backend contract: streaming, n, aborts, cancellation."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from paragen.backends.base import generate
from paragen.backends.engine import EngineBackend
from paragen.errors import ConfigError, EngineError
from paragen.types import ChatMessage, GenerateRequest, SamplingParams

pytestmark = pytest.mark.anyio


@pytest.fixture
async def backend(tiny_llama: Path) -> AsyncIterator[EngineBackend]:
    b = EngineBackend.from_spec(str(tiny_llama), dtype="float32", num_blocks=64, block_size=4)
    yield b
    await b.aclose()


async def test_generate_n_matches_sync_engine(backend: EngineBackend) -> None:
    params = SamplingParams(max_tokens=12, temperature=1.0, seed=5)
    request = GenerateRequest(prompt="Hello there", params=params, n=3)
    got = await generate(backend, request)
    await backend.aclose()  # the step thread must stop before this thread drives the engine itself
    expected = backend.engine.generate([backend.prompt_ids(request)], params, n=3)[0]
    assert [c.token_ids for c in got] == expected
    assert all(c.num_tokens == len(c.token_ids or []) for c in got)
    assert backend.engine.num_free_blocks == 64


async def test_usage_counts_tokens(backend: EngineBackend) -> None:
    request = GenerateRequest(prompt="Hello there", params=SamplingParams(max_tokens=5, temperature=0.0), n=2)
    async with backend.stream(request) as stream:
        deltas = [d async for d in stream]
    p = len(backend.prompt_ids(request))
    assert stream.usage.prompt_tokens == 2 * p and stream.usage.cached_prompt_tokens == p
    assert stream.usage.completion_tokens == len(deltas) == sum(d.num_tokens for d in deltas)


async def test_leaving_early_frees_the_cache(backend: EngineBackend) -> None:
    request = GenerateRequest(prompt="Hello", params=SamplingParams(max_tokens=400, temperature=0.7), n=4)
    async with backend.stream(request) as stream:
        async for delta in stream:
            if delta.index == 0 and delta.num_tokens:
                break
    assert backend.engine.num_free_blocks == 64


async def test_cancelling_the_task_frees_the_cache(backend: EngineBackend) -> None:
    request = GenerateRequest(prompt="Hello", params=SamplingParams(max_tokens=400, temperature=0.7), n=2)
    seen = 0

    async def consume() -> None:
        nonlocal seen
        async with backend.stream(request) as stream:
            async for _ in stream:
                seen += 1

    with anyio.move_on_after(0.5):
        await consume()
    assert backend.engine.num_free_blocks == 64


async def test_abort_one_choice_others_continue(backend: EngineBackend) -> None:
    request = GenerateRequest(prompt="Hello", params=SamplingParams(max_tokens=30, temperature=0.0), n=3)
    counts = [0, 0, 0]
    finish: dict[int, str | None] = {}
    async with backend.stream(request) as stream:
        async for delta in stream:
            counts[delta.index] += 1
            finish[delta.index] = delta.finish_reason
            if delta.index == 1 and counts[1] == 2:
                await stream.abort(1)
    assert counts[1] == 2 and counts[0] == counts[2] == 30
    assert finish[0] == finish[2] == "length"
    assert backend.engine.num_free_blocks == 64


async def test_chat_and_continue_final(backend: EngineBackend) -> None:
    messages = (ChatMessage(role="user", content="Hi"), ChatMessage(role="assistant", content="Well, I"))
    request = GenerateRequest(messages=messages, continue_final=True, params=SamplingParams(max_tokens=2))
    text = backend.engine.tokenizer.decode(backend.prompt_ids(request))
    assert text.endswith("Well, I")
    opened = GenerateRequest(messages=messages[:1], params=SamplingParams(max_tokens=2))
    assert backend.engine.tokenizer.decode(backend.prompt_ids(opened)).endswith("<|im_start|>assistant\n")
    (completion,) = await generate(backend, request)
    assert completion.num_tokens <= 2


async def test_logprobs_and_count_tokens(backend: EngineBackend) -> None:
    params = SamplingParams(max_tokens=3, temperature=0.0, logprobs=True, top_logprobs=3)
    (c,) = await generate(backend, GenerateRequest(prompt="Hi", params=params))
    assert c.logprobs is not None and len(c.logprobs) == 3
    assert c.top_logprobs is not None and all(len(t) == 3 for t in c.top_logprobs)
    assert await backend.count_tokens("hello world") == (2, "tokenizer")


async def test_too_big_request_is_an_engine_error(backend: EngineBackend) -> None:
    request = GenerateRequest(prompt="x " * 400, params=SamplingParams(max_tokens=2))
    with pytest.raises(EngineError):
        async with backend.stream(request):
            pass


def test_unknown_option_is_refused() -> None:
    with pytest.raises(ConfigError, match="kv_cache_gb"):
        EngineBackend.from_spec(None, kv_cache_gb=1)


def test_missing_model_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        EngineBackend.from_spec(str(tmp_path / "nope.gguf"))
    with pytest.raises(ConfigError):
        EngineBackend.from_spec(str(tmp_path))  # a directory without config.json


async def test_capabilities(backend: EngineBackend) -> None:
    caps = backend.capabilities
    assert caps.native_n and caps.per_choice_abort and caps.top_logprobs == 20
    # This model's chat template (SmolLM2's) has no thinking section: no thought for a budget to end, so
    # strategies keep their client-side methods (a Qwen3's declares it: tests/engine/test_thinking_budget.py).
    assert not caps.thinking_budget


async def test_count_tokens_yields_so_a_deadline_stops_a_counting_loop(backend: EngineBackend) -> None:
    """A strategy that counts tokens in a loop (PDR trims a workspace that way) must stay cancellable."""
    import time

    text = "word " * 2000
    guard = time.perf_counter() + 5.0  # only so that the unfixed code ends; the scope should fire at once
    with anyio.move_on_after(0.05) as scope:
        while time.perf_counter() < guard:
            await backend.count_tokens(text)
    assert scope.cancelled_caught
    assert (await backend.count_tokens("Hello there"))[1] == "tokenizer"


async def test_the_model_loads_on_a_thread_that_has_ended(
    tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # OpenMP keeps a worker pool per thread that starts parallel work; a pool left on the caller's
    # thread beside the step thread's makes libgomp stop its workers spinning (every pass slower)
    from paragen.engine.llm_engine import LLMEngine

    built_on: list[threading.Thread] = []
    real_init = LLMEngine.__init__

    def recording_init(self: LLMEngine, *args: object, **kwargs: object) -> None:
        built_on.append(threading.current_thread())
        real_init(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(LLMEngine, "__init__", recording_init)
    backend = EngineBackend.from_spec(str(tiny_llama), dtype="float32", num_blocks=16, block_size=4)
    try:
        (thread,) = built_on
        assert thread is not threading.current_thread() and not thread.is_alive()
        with pytest.raises(ConfigError, match="bad engine option"):
            EngineBackend.from_spec(str(tiny_llama), num_blocks=0)
        with pytest.raises(ConfigError, match="cannot load model"):  # raised on the loading thread
            EngineBackend.from_spec(str(tiny_llama / "missing"))
    finally:
        await backend.aclose()


def test_the_fast_decode_reads_as_the_tokenizer_does(tokenizer_dir: Path) -> None:
    from functools import partial

    from paragen.backends.engine import fast_decode
    from paragen.engine.loader import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_dir)
    text = "**Alice [3]:** 17 × 23 = 391. Ça va? 日本語\n\n<|im_end|> done"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    decode = fast_decode(tokenizer)
    assert isinstance(decode, partial)  # SmolLM2's takes the fast path
    for start in range(len(ids)):
        for end in range(start, len(ids) + 1):
            assert decode(ids[start:end]) == tokenizer.decode(ids[start:end])
