"""The scripted backend's ``coalesce``: tokens already due arrive in one go, as one read of an HTTP stream."""

from __future__ import annotations

import anyio
import pytest

from paragen.backends.scripted import Script, ScriptedBackend
from paragen.types import GenerateRequest, SamplingParams

pytestmark = pytest.mark.anyio


async def read_order(coalesce: bool) -> list[str]:
    """Two streams read at once, each of four tokens due together: which stream each delta came from."""
    backend = ScriptedBackend(lambda _r, _i: Script(text="a b c d", first_delay=0.01), coalesce=coalesce)
    order: list[str] = []

    async def read(name: str) -> None:
        request = GenerateRequest(prompt="q", params=SamplingParams(max_tokens=8))
        async with backend.stream(request) as stream:
            async for delta in stream:
                order.append(f"{name}{delta.text.strip()}")

    async with anyio.create_task_group() as tg:
        tg.start_soon(read, "x")
        tg.start_soon(read, "y")
    return order


async def test_without_coalesce_every_token_is_a_checkpoint() -> None:
    assert await read_order(False) == ["xa", "ya", "xb", "yb", "xc", "yc", "xd", "yd"]


async def test_with_coalesce_due_tokens_arrive_without_a_checkpoint_between() -> None:
    assert await read_order(True) == ["xa", "xb", "xc", "xd", "ya", "yb", "yc", "yd"]


async def test_coalesce_still_waits_for_tokens_not_yet_due() -> None:
    backend = ScriptedBackend([Script(text="a b c", token_delay=0.02)], coalesce=True)
    request = GenerateRequest(prompt="q", params=SamplingParams(max_tokens=8))
    start, times = anyio.current_time(), []
    async with backend.stream(request) as stream:
        async for _ in stream:
            times.append(anyio.current_time() - start)
    assert times[1] >= 0.02 and times[2] >= 0.04
