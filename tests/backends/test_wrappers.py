"""Wrapper backends over the scripted backend: limits, retries, record and replay."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import pytest

from paragen.backends.base import Backend, CompletionStream, generate
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.backends.wrappers import ConcurrencyLimit, Record, Replay, WrapperBackend, request_key
from paragen.errors import BackendConnectionError, BackendError, BackendHTTPError, ConfigError
from paragen.types import GenerateRequest, SamplingParams

pytestmark = pytest.mark.anyio


def test_wrappers_are_backends() -> None:
    inner = ScriptedBackend(["x"])
    for backend in (ConcurrencyLimit(inner, 2), Record(inner, "/tmp/unused.jsonl")):
        assert isinstance(backend, Backend)
        assert backend.capabilities == inner.capabilities and backend.name == "scripted"


async def test_concurrency_limit_holds_a_slot_per_open_stream() -> None:
    inner = ScriptedBackend([Script(text="a b c", token_delay=0.01)])
    backend = ConcurrencyLimit(inner, 2)
    peak = 0

    async def one() -> None:
        nonlocal peak
        async with backend.stream(GenerateRequest(prompt="x")) as stream:
            peak = max(peak, int(backend.limiter.borrowed_tokens))
            async for _ in stream:
                pass

    async with anyio.create_task_group() as tg:
        for _ in range(6):
            tg.start_soon(one)
    assert peak == 2 and backend.limiter.borrowed_tokens == 0 and len(inner.streams) == 6


async def test_one_task_may_hold_several_slots() -> None:
    backend = ConcurrencyLimit(ScriptedBackend(["a"]), 3)
    async with AsyncExitStack() as stack:
        for _ in range(3):
            await stack.enter_async_context(backend.stream(GenerateRequest(prompt="x")))
        assert backend.limiter.borrowed_tokens == 3
    assert backend.limiter.borrowed_tokens == 0


class _RefusingBackend(WrapperBackend):
    """Every stream fails while opening (a server that refuses the connection) until ``refusing`` is off."""

    refusing = True

    def stream(self, request: GenerateRequest) -> AbstractAsyncContextManager[CompletionStream]:
        return self._refuse() if self.refusing else self.inner.stream(request)

    @asynccontextmanager
    async def _refuse(self) -> AsyncIterator[CompletionStream]:
        raise BackendConnectionError("refused")
        yield  # pragma: no cover


async def test_concurrency_limit_gives_the_slot_back_when_opening_fails() -> None:
    # A slot taken before the inner stream opens must be given back when opening raises: else,
    # after `limit` refused opens, every stream would wait forever.
    inner = _RefusingBackend(ScriptedBackend(["a b"]))
    backend = ConcurrencyLimit(inner, 2)
    with anyio.fail_after(5):  # a leaked slot: the third open would wait forever
        for _ in range(3):
            with pytest.raises(BackendConnectionError):
                async with backend.stream(GenerateRequest(prompt="x")):
                    pass  # pragma: no cover
    assert backend.limiter.borrowed_tokens == 0
    inner.refusing = False  # the server answers again
    with anyio.fail_after(5):
        completion = await generate(backend, GenerateRequest(prompt="x"))
    assert completion[0].text == "a b" and backend.limiter.borrowed_tokens == 0


def test_bad_wrapper_arguments() -> None:
    with pytest.raises(ConfigError):
        ConcurrencyLimit(ScriptedBackend(["a"]), 0)
    with pytest.raises(ConfigError, match="no recording"):
        Replay("/nonexistent/run.jsonl")


def test_request_key_ignores_id_and_affinity() -> None:
    a = GenerateRequest(prompt="x", affinity="p1")
    b = GenerateRequest(prompt="x", affinity="p2")
    assert a.request_id != b.request_id and request_key(a) == request_key(b)
    assert request_key(a) != request_key(a.with_params(temperature=0.1))


async def test_record_then_replay_is_faithful(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    inner = ScriptedBackend(["one two three", "four five"])
    recorder = Record(inner, path)
    request = GenerateRequest(prompt="x", params=SamplingParams(logprobs=True))
    originals = []
    for _ in range(2):
        async with recorder.stream(request) as stream:
            originals.append(([d async for d in stream], stream.usage.model_copy()))
    replay = Replay(path)
    assert replay.capabilities == inner.capabilities
    for deltas, usage in originals:
        async with replay.stream(request.with_params()) as stream:
            assert [d async for d in stream] == deltas
            assert stream.usage == usage
    with pytest.raises(BackendError, match="no \\(more\\) recordings"):
        await generate(replay, request)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["complete"] for line in lines] == [True, True]


async def test_replay_loads_a_recording_with_retired_capabilities(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    await generate(Record(ScriptedBackend(["one"]), path), GenerateRequest(prompt="x"))
    [line] = [json.loads(line) for line in path.read_text().splitlines()]
    line["capabilities"] |= {"tokenizer": True, "prompt_cache_reporting": True, "continue_final": False}
    path.write_text(json.dumps(line) + "\n")
    assert not Replay(path).capabilities.continue_final  # the rest is still read
    line["capabilities"]["no_such_capability"] = True
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(ValueError, match="no_such_capability"):
        Replay(path)


async def test_record_keeps_early_exits_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    inner = ScriptedBackend([Script(text="a b c d"), Script(text="x", fail="http500")])
    recorder = Record(inner, path)
    async with recorder.stream(GenerateRequest(prompt="1")) as stream:
        async for _ in stream:
            break
    with pytest.raises(BackendHTTPError):
        await generate(recorder, GenerateRequest(prompt="2"))
    first, second = (json.loads(line) for line in path.read_text().splitlines())
    assert not first["complete"] and len(first["deltas"]) == 1
    assert second["error"]["type"] == "BackendHTTPError" and second["error"]["status_code"] == 500
    with pytest.raises(BackendHTTPError, match="scripted HTTP 500") as info:
        await generate(Replay(path), GenerateRequest(prompt="2"))
    assert info.value.status_code == 500
