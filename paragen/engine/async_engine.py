"""The async front: one worker thread runs the step loop; requests stream through anyio.

Only the step thread touches the engine's state. The event loop hands it new requests
and aborts through a locked inbox, and gets each step's outputs back through one
``anyio.from_thread.run_sync`` call per event loop, which puts them into per-request
memory object streams. An abort is applied at the next step boundary; the caller can
wait for it (the cache is free once the returned event is set). ``call`` runs a function on
the step thread between steps, so it is serialized with ordinary requests' steps;
``call_batched`` does the same for calls that can share one batch (shared-cache sessions'
forward passes): those waiting together run as one call.
"""

from __future__ import annotations

import collections
import contextlib
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import torch
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from paragen.engine.llm_engine import LLMEngine, StepOutput
from paragen.engine.sequence import Sequence
from paragen.errors import EngineError

Item = list[StepOutput] | BaseException
T = TypeVar("T")
X = TypeVar("X")
ABORT_WAIT_S = 10.0  # an abort lands at the next step boundary; a step never takes this long
CLEANUP_WAIT_S = 60.0  # a cleanup call may queue behind a shared session's long prompt prefill
# How long a batch waits for the callers of recent ones: they resend within a few milliseconds of
# their results; one that did other work first would otherwise run one pass behind for good. The
# wait grows with the passes (a tenth of the last one, up to STRAGGLER_MAX_S): on a loaded machine
# eight callers' work between two passes of ~300 ms took longer than 5 ms, and the sessions split
# into cohorts taking turns (190 passes for 128 steps of 8 sessions, measured).
STRAGGLER_WAIT_S = 0.005
STRAGGLER_SHARE = 0.1
STRAGGLER_MAX_S = 0.05
RECENT_BATCHES = 4  # a batch waits for every caller of the last few (or as many as the largest had)


@dataclass(slots=True)
class Sink:
    """Where one request's outputs go: a memory stream owned by one event loop."""

    send: MemoryObjectSendStream[Item]
    token: anyio.lowlevel.EventLoopToken


@dataclass(slots=True)
class Request:
    """The caller's side of a submitted request."""

    seq_ids: list[int]
    receive: MemoryObjectReceiveStream[Item]
    num_prompt_tokens: int
    sink: Sink

    def close(self) -> None:
        """Close both ends (event loop thread only; deliveries run there too, so this cannot race)."""
        self.sink.send.close()
        self.receive.close()


@dataclass(slots=True)
class _Call:
    """A function to run on the step thread, and where its outcome goes."""

    fn: Callable[[], Any]
    done: anyio.Event
    token: anyio.lowlevel.EventLoopToken
    result: Any = None
    error: BaseException | None = None
    # Set for call_batched: the items of all waiting calls with the same batch_fn go in one call.
    batch_fn: Callable[[list[Any]], list[Any]] | None = None
    item: Any = None
    caller: int | None = None  # who sent it (id of the caller's object), when it said


@dataclass(slots=True)
class _Inbox:
    adds: list[tuple[list[Sequence], Sink]] = field(default_factory=list)
    aborts: list[tuple[list[int], threading.Event]] = field(default_factory=list)
    calls: list[_Call] = field(default_factory=list)


class AsyncEngine:
    def __init__(self, engine: LLMEngine, *, merge_batched_calls: bool = True):
        self.engine = engine
        # False runs each call_batched alone (the A/B switch of benchmarks/hogwild_sessions.py).
        self.merge_batched_calls = merge_batched_calls
        # The callers of the last few batches (None: one that did not say who it is).
        self._recent: collections.deque[list[int | None]] = collections.deque(maxlen=RECENT_BATCHES)
        self._last_batch_s = 0.0
        self._cond = threading.Condition()
        self._inbox = _Inbox()
        self._sinks: dict[int, Sink] = {}
        self._thread: threading.Thread | None = None
        self._is_closed = False

    @property
    def num_free_blocks(self) -> int:
        return self.engine.num_free_blocks

    def submit(self, prompt_ids: list[int], seqs: list[Sequence]) -> Request:
        """Queue sequences made by ``engine.new_request``; call from inside an event loop."""
        if self._is_closed:
            raise EngineError("the engine is closed")
        send, receive = anyio.create_memory_object_stream[Item](math.inf)
        sink = Sink(send, anyio.lowlevel.current_token())
        with self._cond:
            self._inbox.adds.append((seqs, sink))
            self._cond.notify()
        self._ensure_thread()
        return Request([seq.seq_id for seq in seqs], receive, len(prompt_ids), sink)

    def abort(self, seq_ids: list[int]) -> threading.Event:
        """Abort sequences at the next step boundary; the event is set once their cache is free."""
        done = threading.Event()
        with self._cond:
            self._inbox.aborts.append((list(seq_ids), done))
            self._cond.notify()
        if self._thread is None:
            done.set()
        return done

    async def abort_and_wait(self, seq_ids: list[int]) -> None:
        done = self.abort(seq_ids)
        with anyio.CancelScope(shield=True), anyio.move_on_after(ABORT_WAIT_S):
            await anyio.to_thread.run_sync(done.wait)

    async def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the step thread between two steps and return its result (or raise its error).

        Cancelling the caller does not stop ``fn`` once the step thread has taken it; anything that
        must happen after it (freeing a session's blocks) is queued behind it as another call.
        """
        result: T = await self._submit_call(_Call(fn, anyio.Event(), anyio.lowlevel.current_token()))
        return result

    async def call_batched(
        self, batch_fn: Callable[[list[X]], list[T | EngineError]], item: X, *, caller: object = None
    ) -> T:
        """``batch_fn([item, ...])[i]`` on the step thread, ``item`` batched with the others waiting.

        ``batch_fn`` returns one outcome per item, in order: a result, or an EngineError that
        only that item's caller gets. Cancellation behaves as for ``call``. ``caller`` (an object
        that sends one call at a time, such as a session): a batch waits briefly for every caller
        of the last few batches, so one a pass late (at a step boundary) does not run behind.
        """
        token = anyio.lowlevel.current_token()
        job = _Call(_unbatched, anyio.Event(), token, batch_fn=batch_fn, item=item, caller=_key(caller))
        result: T = await self._submit_call(job)
        return result

    async def _submit_call(self, job: _Call) -> Any:
        if self._is_closed:
            raise EngineError("the engine is closed")
        with self._cond:
            self._inbox.calls.append(job)
            self._cond.notify()
        self._ensure_thread()
        await job.done.wait()
        if job.error is not None:
            raise job.error
        return job.result

    async def call_shielded(self, fn: Callable[[], object]) -> None:
        """``call`` that a cancelled caller still waits for (cleanup), up to CLEANUP_WAIT_S."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP_WAIT_S):
            await self.call(fn)

    def _ensure_thread(self) -> None:
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="paragen-engine", daemon=True)
                self._thread.start()

    async def aclose(self) -> None:
        with self._cond:
            self._is_closed = True
            self._cond.notify()
        if self._thread is not None:
            await anyio.to_thread.run_sync(self._thread.join)
            self._thread = None

    def _loop(self) -> None:
        # Intra-op thread settings are per thread: without this the step thread may run on one core
        # (and reduce in a different order than the engine's own thread would).
        torch.set_num_threads(self.engine.num_threads)
        while True:
            with self._cond:
                while not self._is_closed and self.engine.is_idle and not self._has_mail():
                    self._cond.wait()
                if self._is_closed:
                    break
                inbox, self._inbox = self._inbox, _Inbox()
            self._await_stragglers(inbox)
            self._apply(inbox)
            if not self.engine.is_idle:
                self._step()
        self._shut_down()

    def _shut_down(self) -> None:
        """Fail what runs and what is still queued: a caller never waits on a closed engine.

        Adds, aborts and calls that arrived after the loop's last turn were never applied;
        their callers get an EngineError (an abort's waiter is woken, nothing is left to free).
        """
        self._fail_all(EngineError("the engine was closed"))
        with self._cond:
            inbox, self._inbox = self._inbox, _Inbox()
        closed = EngineError("the engine was closed before the request started")
        self._deliver([(sink, closed) for _, sink in inbox.adds])
        for _, done in inbox.aborts:
            done.set()
        for job in inbox.calls:
            job.error = EngineError("the engine was closed")
        self._finish_calls(inbox.calls)

    def _await_stragglers(self, inbox: _Inbox) -> None:
        """Wait briefly until as many batched calls wait as recent batches had callers.

        Only batched calls join ``inbox``. Its other calls, and those that arrive meanwhile, run at
        once (a session's step boundary: fold, free, new segment, a round trip each), each starting
        the wait over, so that session still makes this batch; adds and aborts stay for the next
        turn of the loop. Running them first is safe: a session has one call in flight, and a
        cleanup that overtakes a cancelled caller's queued forward only makes that forward fail (its
        session is closed) before it writes anything.
        """
        expected = self._expected_callers()
        num_batched = sum(job.batch_fn is not None for job in inbox.calls)
        if not self.merge_batched_calls or not 0 < num_batched < expected:
            return
        wait = min(max(STRAGGLER_WAIT_S, STRAGGLER_SHARE * self._last_batch_s), STRAGGLER_MAX_S)
        started = time.monotonic()
        deadline = started + wait
        arrived, inbox.calls = inbox.calls, []
        while True:
            for job in arrived:
                if job.batch_fn is not None:
                    inbox.calls.append(job)
                    continue
                self._run_call(job)
                # Its caller is at a step boundary, a round trip or two from its next pass: the wait
                # starts over (within STRAGGLER_MAX_S), else each of its calls waited a whole pass.
                deadline = max(deadline, min(time.monotonic() + wait, started + STRAGGLER_MAX_S))
            if len(inbox.calls) >= expected or self._is_closed:
                return
            with self._cond:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                if not self._inbox.calls:
                    self._cond.wait(left)
                arrived, self._inbox.calls = self._inbox.calls, []

    def _expected_callers(self) -> int:
        """How many batched calls a batch waits for: every caller of the recent batches that said who
        it is (one that missed the last one, at a step boundary, included), and as many others as the
        largest of them had."""
        named = {caller for batch in self._recent for caller in batch if caller is not None}
        anonymous = max((sum(caller is None for caller in batch) for batch in self._recent), default=0)
        return len(named) + anonymous

    def _has_mail(self) -> bool:
        return bool(self._inbox.adds or self._inbox.aborts or self._inbox.calls)

    def _apply(self, inbox: _Inbox) -> None:
        for seqs, sink in inbox.adds:
            self.engine.enqueue(seqs)
            self._sinks.update((seq.seq_id, sink) for seq in seqs)
        for seq_ids, done in inbox.aborts:
            for seq_id in seq_ids:
                self.engine.abort(seq_id)
                self._sinks.pop(seq_id, None)
            done.set()
        # Batched calls first, merged per batch_fn: a session has one call waiting at a time, so
        # this reorders only different sessions' calls (and a cancelled call's cleanup, which
        # then still runs after it).
        batches: dict[Callable[[list[Any]], list[Any]], list[_Call]] = {}
        for job in inbox.calls:
            if job.batch_fn is not None:
                batches.setdefault(job.batch_fn, []).append(job)
        if batches:
            self._recent.append([job.caller for job in max(batches.values(), key=len)])
        started = time.monotonic()
        for batch_fn, jobs in batches.items():
            groups = [jobs] if self.merge_batched_calls else [[job] for job in jobs]
            for group in groups:
                self._run_batch(batch_fn, group)
        if batches:
            self._last_batch_s = time.monotonic() - started
        for job in inbox.calls:
            if job.batch_fn is None:
                self._run_call(job)

    def _run_call(self, job: _Call) -> None:
        try:
            job.result = job.fn()
        except Exception as exc:  # the caller gets it as an EngineError; the step thread goes on
            job.error = _engine_error(exc)
        self._finish_calls([job])

    def _run_batch(self, batch_fn: Callable[[list[Any]], list[Any]], jobs: list[_Call]) -> None:
        try:
            outcomes = batch_fn([job.item for job in jobs])
        except Exception as exc:  # the whole batch failed: every caller gets the error
            outcomes = [_engine_error(exc) for _ in jobs]
        for job, outcome in zip(jobs, outcomes, strict=True):
            if isinstance(outcome, EngineError):
                job.error = outcome
            else:
                job.result = outcome
        self._finish_calls(jobs)

    @staticmethod
    def _finish_calls(jobs: list[_Call]) -> None:
        # One hop per event loop: its callers all wake in one loop iteration, so they send their
        # next batched calls together (a hop per call would wake them one pass apart).
        per_loop: dict[anyio.lowlevel.EventLoopToken, list[anyio.Event]] = defaultdict(list)
        for job in jobs:
            per_loop[job.token].append(job.done)
        for token, events in per_loop.items():
            with contextlib.suppress(Exception):  # the caller's event loop is gone: nobody waits
                anyio.from_thread.run_sync(_set_all, events, token=token)

    def _step(self) -> None:
        try:
            outputs = self.engine.step()
        except Exception as exc:  # a failed step fails its requests, not the engine thread
            self._fail_all(EngineError(f"engine step failed: {exc!r}"))
            return
        by_sink: dict[int, tuple[Sink, list[StepOutput]]] = {}
        for out in outputs:
            sink = self._sinks.get(out.seq_id)
            if sink is None:
                continue
            by_sink.setdefault(id(sink), (sink, []))[1].append(out)
            if out.finish_reason is not None:
                del self._sinks[out.seq_id]
        self._deliver([(sink, batch) for sink, batch in by_sink.values()])

    def _fail_all(self, exc: BaseException) -> None:
        sinks = {id(s): s for s in self._sinks.values()}
        for seq_id in list(self._sinks):
            self.engine.abort(seq_id)
        self._sinks.clear()
        self._deliver([(sink, exc) for sink in sinks.values()])

    def _deliver(self, items: list[tuple[Sink, Item]]) -> None:
        # One hop into each event loop per step, however many requests live there.
        per_loop: dict[anyio.lowlevel.EventLoopToken, list[tuple[Sink, Item]]] = defaultdict(list)
        for sink, item in items:
            per_loop[sink.token].append((sink, item))
        for token, batch in per_loop.items():
            try:
                anyio.from_thread.run_sync(_put_all, batch, token=token)
            except Exception:
                for sink, _ in batch:
                    self._drop(sink)

    def _drop(self, sink: Sink) -> None:
        for seq_id in [i for i, s in self._sinks.items() if s is sink]:
            self.engine.abort(seq_id)
            del self._sinks[seq_id]


def _put_all(batch: list[tuple[Sink, Item]]) -> None:
    for sink, item in batch:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            sink.send.send_nowait(item)  # a closed stream: the reader left and its abort is on the way


def _set_all(events: list[anyio.Event]) -> None:
    for event in events:
        event.set()


def _engine_error(exc: Exception) -> EngineError:
    if isinstance(exc, EngineError):
        return exc
    error = EngineError(f"engine call failed: {exc!r}")
    error.__cause__ = exc
    return error


def _key(caller: object) -> int | None:
    return None if caller is None else id(caller)


def _unbatched() -> None:
    raise AssertionError("a batched call runs through its batch_fn")
