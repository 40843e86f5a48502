"""Fan-out: run many samples at once and hand back each trace as it finishes.

One task group per fan-out. A sample of its own request runs in its own cancel
scope, so stopping it closes its stream (the server aborts the request). Choices of
one ``n > 1`` request share a stream when the backend can abort choices one by one
(the engine: one prefill serves all choices); stopping one aborts just that choice.
It files traces through an :class:`~paragen._ledger.Account`, never through the
RunContext, so the context builds on this module and not the other way round.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from paragen import tracing
from paragen._ledger import Account
from paragen._live import LiveSample, Monitor, abort_choices, stop_sample, stop_samples
from paragen.backends.base import Capabilities, CompletionStream
from paragen.backends.routing import routing_key
from paragen.errors import BackendError
from paragen.reasoning import ThinkFormat, leaves_open, prefill_of
from paragen.types import GenerateRequest, Trace

Job = Callable[[], Coroutine[Any, Any, None]]
Opener = Callable[[GenerateRequest], AbstractAsyncContextManager[CompletionStream]]


class Fanout:
    """Async iterator of finished traces (and of checkpointed running ones); see RunContext.fanout."""

    def __init__(
        self,
        account: Account,
        requests: list[GenerateRequest],
        *,
        label: str,
        kind: str,
        parents: Sequence[int] = (),
        checkpoint: int | None = None,
        monitor: Monitor | None = None,
        opener: Opener | None = None,
    ) -> None:
        self._account = account
        self._opener = opener  # opens a sample's stream instead of backend.stream (a probe's fork)
        self._requests = requests
        self._label = label
        self._parents = list(parents)
        self._checkpoint = checkpoint
        self._monitor = monitor
        # Whether a delta needs anything beyond being added: the hot loops skip _after_delta otherwise.
        self._watching = monitor is not None or checkpoint is not None
        self._kind = kind
        self._lives: list[LiveSample] = []
        self._checkpointed: set[int] = set()
        self._num_ended = 0
        send, recv = anyio.create_memory_object_stream[Trace](math.inf)
        self._send: MemoryObjectSendStream[Trace] = send
        self._recv: MemoryObjectReceiveStream[Trace] = recv
        self._tg: TaskGroup | None = None

    # -- the public surface ----------------------------------------------------------------------

    @property
    def traces(self) -> list[Trace]:
        """Every trace of this fan-out, running or not (running ones' text is not kept current)."""
        return [live.trace for live in self._lives]

    @property
    def running(self) -> list[LiveSample]:
        return [live for live in self._lives if live.is_running]

    async def cancel(self, reason: str) -> None:
        """Stop every sample of this fan-out that still runs, all at once (``stop_samples``)."""
        await stop_samples(self._lives, reason, "cancelled")

    async def stop(self, trace_id: int, reason: str, *, pruned: bool = False) -> None:
        """Stop one sample (status "pruned" when ``pruned``, else "cancelled")."""
        for live in self._lives:
            if live.trace.id == trace_id:
                await stop_sample(live, reason, "pruned" if pruned else "cancelled")

    def __aiter__(self) -> Fanout:
        return self

    async def __anext__(self) -> Trace:
        try:
            return await self._recv.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def one(self) -> Trace:
        """Run a fan-out of exactly one sample in the caller's own task; its trace once it ends.

        What ``async with`` and ``async for`` do for one sample, without the task group, task and
        stream between them, which cost a third of a short run (``RunContext.sample`` takes this
        path). Stopping it (its cancel scope, a spent budget) or cancelling the caller ends it the
        same way.
        """
        if len(self._requests) != 1 or self._requests[0].n != 1:
            self._send.close()
            self._recv.close()
            raise ValueError("Fanout.one() runs a fan-out of exactly one sample")
        jobs = self._open()
        try:
            await jobs[0]()
        finally:
            self._recv.close()
        return self._lives[0].trace

    # -- lifecycle -------------------------------------------------------------------------------

    def _open(self) -> list[Job]:
        """The samples' traces filed and their jobs, or nothing left behind if that fails."""
        account = self._account
        try:  # a spent budget refuses here, and the streams made in __init__ are closed all the same
            requests = [account.ledger.check_budget(r) for r in self._requests]
            return self._prepare(requests, account.backend.capabilities)
        except BaseException:
            for live in self._lives:  # filed but never started: closed as abandoned, nothing to stop
                account.ledger.live.pop(live.trace.id, None)
                live.finish(account.now())
            self._send.close()
            self._recv.close()
            raise

    async def __aenter__(self) -> Fanout:
        # Everything that can fail happens before the task group exists: a task group left by
        # an exception of its own host would hide that exception in an ExceptionGroup (or, not
        # left at all, in anyio's "exit a cancel scope" error).
        jobs = self._open()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        for job in jobs:
            self._tg.start_soon(job)
        if not self._lives:
            self._send.close()
        return self

    def _prepare(self, requests: list[GenerateRequest], caps: Capabilities) -> list[Job]:
        """A trace per sample, filed now, and the job that will drive it."""
        jobs: list[Job] = []
        for request in requests:
            fmt = _think_format(request, caps, self._kind)
            if request.n > 1 and caps.native_n and caps.per_choice_abort:
                lives = [self._new_live(i, fmt) for i in range(request.n)]
                for live in lives:
                    _note_routing(live.trace, request, caps)
                jobs.append(functools.partial(self._drive_group, lives, request))
                continue
            for i in range(request.n):
                one = request if request.n == 1 else _single(request, i)
                live = self._new_live(0, fmt)
                _note_routing(live.trace, request, caps)
                live.scope = anyio.CancelScope()
                jobs.append(functools.partial(self._drive_one, live, one))
        return jobs

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        await self.cancel("abandoned")
        assert self._tg is not None
        try:
            return await self._tg.__aexit__(exc_type, exc, tb)
        finally:
            self._recv.close()

    # -- driving samples -------------------------------------------------------------------------

    def _new_live(self, index: int, fmt: ThinkFormat) -> LiveSample:
        trace = self._account.new_trace(self._label, self._kind, list(self._parents))
        live = LiveSample(trace, index, fmt)
        self._lives.append(live)
        self._account.ledger.live[trace.id] = live
        return live

    async def _drive_one(self, live: LiveSample, request: GenerateRequest) -> None:
        account, error, stream = self._account, None, None
        ledger = account.ledger
        assert live.scope is not None
        live.request = request
        try:
            with live.scope, tracing.current(live.trace):  # its backend requests: children of its span
                async with (self._opener or account.backend.stream)(request) as stream:
                    live.stream = stream
                    now, charge, add = ledger.clock.now, ledger.charge, live.add
                    async for delta in stream:
                        add(delta, now())
                        if charge(delta.num_tokens):
                            await ledger.cancel_all("budget")
                        if self._watching:
                            await self._after_delta(live)
                    error = unfinished(live)
        except BackendError as exc:
            error = exc.one_line()
        finally:
            if stream is not None:
                ledger.charge(live.apply_usage(stream.usage))
            self._end(live, error)

    async def _drive_group(self, lives: list[LiveSample], request: GenerateRequest) -> None:
        account, error, stream = self._account, None, None
        ledger = account.ledger
        # Once no choice is left running, stop reading: a backend need not end the stream by
        # itself after its last choice was aborted, and waiting on it would hang the fan-out.
        scope = anyio.CancelScope()

        def end_choice(live: LiveSample) -> None:
            self._end(live, None)
            if not any(other.is_running for other in lives):
                scope.cancel()

        try:
            with scope, tracing.current(lives[0].trace):
                async with account.backend.stream(request) as stream:
                    for live in lives:
                        live.group = live.stream = stream
                        live.request = request
                        live.on_stop = functools.partial(end_choice, live)
                    # the choices stopped before the stream opened
                    await abort_choices([live for live in lives if live.stop_reason is not None])
                    async for delta in stream:
                        live = lives[delta.index]
                        if not live.is_running or live.stop_reason is not None:
                            continue
                        live.add(delta, ledger.clock.now())
                        if ledger.charge(delta.num_tokens):
                            await ledger.cancel_all("budget")
                        if delta.finish_reason is not None:
                            live.apply_usage(stream.usage, choices=len(lives))
                        if self._watching:  # the last delta too, as a sample of its own request
                            await self._after_delta(live)
                        if delta.finish_reason is not None:
                            end_choice(live)
                    self._end_unfinished(lives, stream)
        except BackendError as exc:
            error = exc.one_line()
        finally:
            for live in lives:
                if stream is not None:
                    live.apply_usage(stream.usage, choices=len(lives))
                self._end(live, error if live.stop_reason is None else None)

    def _end_unfinished(self, lives: list[LiveSample], stream: CompletionStream) -> None:
        """The stream ended: a choice still running was ended by the server, not by paragen."""
        for live in lives:
            why = unfinished(live) if live.is_running else None
            if why is not None:
                live.apply_usage(stream.usage, choices=len(lives))
                self._end(live, why)

    async def _after_delta(self, live: LiveSample) -> None:
        if self._monitor is not None and live.stop_reason is None:
            reason = self._monitor(live)
            if inspect.isawaitable(reason):
                reason = await reason
            if reason is not None:
                await stop_sample(live, reason, "pruned")
                return
        checkpoint = self._checkpoint
        if (
            checkpoint is not None
            and live.num_tokens >= checkpoint
            and live.trace.id not in self._checkpointed
        ):
            self._checkpointed.add(live.trace.id)
            self._send.send_nowait(live.snapshot())

    def _end(self, live: LiveSample, error: str | None) -> None:
        if not live.is_running:
            return
        trace = live.finish(self._account.now(), error=error)
        self._account.ended(trace)
        self._num_ended += 1
        # If the consumer has left, the trace is in the ledger all the same.
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._send.send_nowait(trace)
        if self._num_ended == len(self._lives):
            self._send.close()


class ToolSpan:
    """Times one tool call (or a scorer's call: ``kind="score"``) as a trace of its own; an
    exception marks it "error" and propagates."""

    def __init__(
        self,
        account: Account,
        label: str,
        meta: dict[str, Any],
        *,
        kind: str = "tool",
        parents: Sequence[int] = (),
    ) -> None:
        self._account = account
        self._trace = account.new_trace(label, kind, list(parents))
        self._trace.meta.update(meta)

    async def __aenter__(self) -> Trace:
        return self._trace

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        trace = self._trace
        trace.end = self._account.now()
        if exc is not None:
            cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
            trace.status = "cancelled" if cancelled else "error"
            trace.error = None if cancelled else f"{type(exc).__name__}: {exc}"
        trace.finish_reason = "stop" if trace.status == "ok" else "abort"
        self._account.ended(trace)


def unfinished(live: LiveSample) -> str | None:
    """Why a sample whose stream ended without its last delta failed: the server ended it, not paragen
    (a llama-cpp-python server ends a running stream this way when the next request arrives, unless it
    was started with ``--interrupt_requests False``); None when it finished or paragen stopped it."""
    if live.finished or live.stop_reason is not None:
        return None
    return (
        "BackendProtocolError: the server ended the stream before the sample finished (no finish "
        "reason); a llama.cpp server does so when another request arrives unless started with "
        "--interrupt_requests False"
    )


def _note_routing(trace: Trace, request: GenerateRequest, caps: Capabilities) -> None:
    """Record the key a gateway pins this sample's requests by, where one is in front."""
    if caps.routing_header is not None and request.affinity is not None:
        trace.meta["routing_key"] = routing_key(request.affinity)


def _think_format(request: GenerateRequest, caps: Capabilities, kind: str) -> ThinkFormat:
    """How a sample's output is split. A probe's output is a forced answer, never split. A
    continuation (a raw prompt, a prefilled reply) starts inside the thinking exactly when its
    prefill left a ``<think>`` open; a fresh chat turn starts as the model family does."""
    fmt = caps.thinking
    if kind == "probe":
        return "none"
    if fmt not in ("think", "think_open"):
        return fmt
    prefill = prefill_of(request)
    if prefill is None:
        return fmt
    return "think_open" if leaves_open(prefill) else "think"


def _single(request: GenerateRequest, index: int) -> GenerateRequest:
    """Choice ``index`` of an n-request as its own request; seeds differ so the samples do."""
    params = request.params
    seed = None if params.seed is None else params.seed + index
    return request.model_copy(
        update={
            "n": 1,
            "request_id": f"{request.request_id}-{index}",
            "params": params.model_copy(update={"seed": seed}),
        }
    )


__all__ = ["Fanout", "ToolSpan"]
