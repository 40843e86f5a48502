"""A cancel that stops many samples is one operation: every abort is issued before any is awaited,
and a sample marked to stop cannot end "ok" while another's abort is under way.

Concurrency is checked by the order of what the backend saw, not by timing: each abort here waits
until every abort of the cancel has started, so a cancel that awaited one before issuing the next
would log start, end, start, end.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from paragen import Orchestrator, Problem, RunContext, StrategyResult
from paragen.backends.base import Capabilities, CompletionStream
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.events import Note
from paragen.strategy import BaseStrategy, StrategyConfig
from paragen.types import Delta, GenerateRequest, SamplingParams
from strategies.ffs import FFS

pytestmark = pytest.mark.anyio
PROBLEM = Problem(id="p", question="What is 2 + 3?")
SYNC = Capabilities(native_n=True, per_choice_abort=True, continue_final=True)
GATE_S = 1.0  # how long an abort waits for the others to start before it gives up (a hang guard)


def words(n: int, answer: str) -> str:
    return " ".join([f"w{i}" for i in range(n - 1)] + [f"\\boxed{{{answer}}}"])


class SlowAborts(ScriptedBackend):
    """A scripted backend whose per-choice aborts are slow: each waits until ``expected`` aborts
    have started (at most GATE_S), or ``delay`` seconds when no count is expected."""

    def __init__(
        self, scripts: Any, *, expected: int | None = None, delay: float = 0.0, order: Any = "fanout"
    ) -> None:
        super().__init__(scripts, capabilities=SYNC, order=order)
        self.expected = expected
        self.delay = delay
        self.log: list[tuple[str, int]] = []
        self.all_started = anyio.Event()

    @asynccontextmanager
    async def stream(self, request: GenerateRequest) -> AsyncIterator[CompletionStream]:
        async with super().stream(request) as inner:
            yield _SlowAbortStream(inner, self)

    async def wait(self, index: int) -> None:
        self.log.append(("start", index))
        if self.expected is None:
            await anyio.sleep(self.delay)
        else:
            if sum(1 for what, _ in self.log if what == "start") == self.expected:
                self.all_started.set()
            with anyio.move_on_after(GATE_S):
                await self.all_started.wait()
        self.log.append(("end", index))


class _SlowAbortStream:
    def __init__(self, inner: CompletionStream, backend: SlowAborts) -> None:
        self._inner = inner
        self._backend = backend
        self.usage = inner.usage

    def __aiter__(self) -> AsyncIterator[Delta]:
        return self._inner.__aiter__()

    async def abort(self, index: int) -> None:
        await self._backend.wait(index)
        await self._inner.abort(index)


def issued_before_awaited(log: list[tuple[str, int]], expected: int) -> bool:
    return [what for what, _ in log] == ["start"] * expected + ["end"] * expected


async def test_ffs_issues_every_abort_before_awaiting_any() -> None:
    scripts = [Script(text=words(2, "5"), token_delay=0.01)] + [
        Script(text=words(50, "7"), token_delay=0.01)
    ] * 3
    backend = SlowAborts(scripts, expected=3)
    with anyio.fail_after(10):
        result = await Orchestrator(backend, defaults=SamplingParams(max_tokens=64)).run(FFS(n=4), PROBLEM)
    assert issued_before_awaited(backend.log, 3), backend.log
    assert sorted(index for what, index in backend.log if what == "start") == [1, 2, 3]
    assert [t.status for t in result.traces].count("cancelled") == 3


class CancelOnFirst(BaseStrategy[StrategyConfig]):
    """Two fan-outs of one shared request of three choices each; the first finisher of the first
    cancels the whole run (ctx.cancel), so five choices of two streams are stopped together."""

    name = "cancel_on_first"

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        fast, slow = ctx.request(prompt="fast"), ctx.request(prompt="slow")
        async with ctx.fanout(fast, n=3) as fan, ctx.fanout(slow, n=3):
            async for trace in fan:
                await ctx.cancel("first-finish")
                return ctx.finish(None, text=trace.text)
        return ctx.finish(None)


def fast_or_slow(request: GenerateRequest, index: int) -> Script:
    if request.prompt == "fast" and index == 0:
        return Script(text=words(2, "5"), token_delay=0.01)
    return Script(text=words(50, "7"), token_delay=0.01)


async def test_the_run_cancel_aborts_every_stream_at_once() -> None:
    backend = SlowAborts(fast_or_slow, expected=5, order="call")
    with anyio.fail_after(10):
        result = await Orchestrator(backend).run(CancelOnFirst(), PROBLEM)
    assert issued_before_awaited(backend.log, 5), backend.log
    assert [t.cancel_reason for t in result.traces].count("first-finish") == 5


async def test_ffs_k_cancels_a_sample_that_finishes_while_the_aborts_land() -> None:
    """k=2: choice 3 sends its last token while choice 2's (slow) abort is under way. It was marked
    with the others at the decision, so it ends cancelled, not "ok" after the decision."""
    scripts = [
        Script(text=words(2, "5"), token_delay=0.1),  # ends at t=0.1
        Script(text=words(3, "5"), token_delay=0.1),  # ends at t=0.2: the decision
        Script(text=words(50, "7"), token_delay=0.1),
        Script(text=words(5, "7"), token_delay=0.1),  # ends at t=0.4, mid-abort
    ]
    backend = SlowAborts(scripts, delay=0.6)
    decisions: list[float] = []

    def on_event(event: Any) -> None:
        if isinstance(event, Note) and event.message == "ffs: enough finishers":
            decisions.append(event.t)

    orch = Orchestrator(backend, defaults=SamplingParams(max_tokens=64), on_event=on_event)
    with anyio.fail_after(10):
        result = await orch.run(FFS(n=4, k=2), PROBLEM)
    (decided,) = decisions
    ok = [t for t in result.traces if t.status == "ok"]
    assert all((t.end or 0) <= decided for t in ok), [(t.label, t.end, decided) for t in ok]
    assert len(ok) == 2 and result.answer == "5"
    assert {t.cancel_reason for t in result.traces if t.status != "ok"} == {"first-finish"}
