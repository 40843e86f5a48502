"""The scripted fakes' timing: ``coalesce`` (tokens already due arrive in one go, as one read of an
HTTP stream) and ``precise`` (a wait ends at its deadline, not at the event loop's next timer tick)."""

from __future__ import annotations

import time

import anyio
import anyio.lowlevel
import pytest

from paragen._timing import sleep_until
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.scoring import ScoreRequest, ScriptedScorer
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
    # The other stream runs between one stream's tokens: the two interleave, where with coalesce
    # (below) one stream's tokens all come first. Not strict turns: each stream's deadlines count
    # from its own start, so under load one may sleep past a round the other uses (trio shuffles
    # tasks woken together, too).
    order = await read_order(False)
    x, y = ["xa", "xb", "xc", "xd"], ["ya", "yb", "yc", "yd"]
    assert sorted(order) == sorted(x + y) and order not in (x + y, y + x)
    assert [t for t in order if t[0] == "x"] == x and [t for t in order if t[0] == "y"] == y


async def test_with_coalesce_due_tokens_arrive_without_a_checkpoint_between() -> None:
    # One stream's tokens all, then the other's (either may go first: the event loop's choice).
    x, y = ["xa", "xb", "xc", "xd"], ["ya", "yb", "yc", "yd"]
    assert await read_order(True) in (x + y, y + x)


async def test_coalesce_still_waits_for_tokens_not_yet_due() -> None:
    backend = ScriptedBackend([Script(text="a b c", token_delay=0.02)], coalesce=True)
    request = GenerateRequest(prompt="q", params=SamplingParams(max_tokens=8))
    start, times = anyio.current_time(), []
    async with backend.stream(request) as stream:
        async for _ in stream:
            times.append(anyio.current_time() - start)
    assert times[1] >= 0.02 and times[2] >= 0.04


@pytest.mark.parametrize("ahead", [0.0005, 0.003, 0.0103])
async def test_a_precise_wait_never_ends_before_its_deadline(ahead: float) -> None:
    for _ in range(5):
        deadline = time.perf_counter() + ahead
        await sleep_until(deadline, precise=True)
        assert time.perf_counter() >= deadline


async def test_a_precise_wait_whose_deadline_passed_is_still_a_checkpoint() -> None:
    order: list[str] = []

    async def wait() -> None:
        await sleep_until(time.perf_counter() - 1.0, precise=True)
        order.append("waited")

    async def other() -> None:
        order.append("other")

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait)
        tg.start_soon(other)
    assert order == ["other", "waited"]


async def test_a_precise_wait_is_cancelled_while_it_spins() -> None:
    ended: list[float] = []
    deadline = time.perf_counter() + 0.0015  # within the slack: spinning from the start

    async def wait() -> None:
        await sleep_until(deadline, precise=True)
        ended.append(time.perf_counter())

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait)
        await anyio.lowlevel.checkpoint()
        tg.cancel_scope.cancel()
    assert not ended  # a wait that spun without checkpoints would have finished before the cancel


async def test_the_precise_backend_delivers_no_token_before_it_is_due() -> None:
    backend = ScriptedBackend([Script(text="a b c", first_delay=0.004, token_delay=0.003)], precise=True)
    request = GenerateRequest(prompt="q", params=SamplingParams(max_tokens=8))
    start, times = time.perf_counter(), []
    async with backend.stream(request) as stream:
        async for _ in stream:
            times.append(time.perf_counter() - start)
    assert times[0] >= 0.004 and times[1] >= 0.007 and times[2] >= 0.010


async def test_a_precise_scorer_call_lasts_its_latency_and_counts_a_cancel() -> None:
    scorer = ScriptedScorer(lambda _r: 0.5, latency=0.004, precise=True)
    request = ScoreRequest(question="q", steps=("a",))
    start = time.perf_counter()
    assert (await scorer.score(request)).steps == (0.5,)
    assert time.perf_counter() - start >= 0.004
    with anyio.move_on_after(0.001):
        await scorer.score(request)
    assert (scorer.finished, scorer.cancelled) == (1, 1)
