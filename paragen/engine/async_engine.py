"""The async front: one worker thread runs the step loop; requests stream through anyio.

Only the step thread touches the engine's state. The event loop hands it new requests
and aborts through a locked inbox, and gets each step's outputs back through one
``anyio.from_thread.run_sync`` call per event loop, which puts them into per-request
memory object streams (``streams.py``). An abort is applied at the next step boundary; the
caller can wait for it (the cache is free once the returned event is set). Every abort in the
inbox at a boundary is applied there, and the aborts an event loop sends together are posted as
one, so a cancel of many sequences costs at most one step. ``call`` runs a
function on the step thread between steps, so it is serialized with ordinary requests' steps;
``call_batched`` does the same for calls that can share one batch (shared sessions' forward
passes): those waiting together run as one call (``calls.py``).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import torch

from paragen.engine.calls import Call, StepCalls, caller_key, finish, unbatched
from paragen.engine.llm_engine import LLMEngine
from paragen.engine.sequence import Sequence
from paragen.engine.streams import Item, Request, Sink, Sinks
from paragen.errors import EngineError

T = TypeVar("T")
X = TypeVar("X")
ABORT_WAIT_S = 10.0  # an abort lands at the next step boundary; a step never takes this long
CLEANUP_WAIT_S = 60.0  # a cleanup call may queue behind a shared session's long prompt prefill


@dataclass(slots=True)
class _Inbox:
    adds: list[tuple[list[Sequence], Sink]] = field(default_factory=list)
    aborts: list[tuple[list[int], threading.Event]] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)


@dataclass(slots=True)
class _AbortBatch:
    """Aborts sent from one event loop in one pass, posted to the step thread together."""

    seq_ids: list[int]
    landed: anyio.Event = field(default_factory=anyio.Event)


class AsyncEngine:
    def __init__(self, engine: LLMEngine, *, merge_batched_calls: bool = True):
        self.engine = engine
        self.calls = StepCalls(merge_batched_calls=merge_batched_calls)
        self._cond = threading.Condition()
        self._inbox = _Inbox()
        self._abort_batches: dict[anyio.lowlevel.EventLoopToken, _AbortBatch] = {}
        self._sinks = Sinks(engine)
        self._thread: threading.Thread | None = None
        self._is_closed = False
        # The last step found nothing to run (every running sequence stalled, streams.py): the loop
        # waits for mail or for a reader to catch up (wake) instead of stepping in vain.
        self._stuck = False
        self._wakes = 0  # wake() calls so far: one that lands during a vain step unsticks the loop

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
        """``abort`` and wait until the cache is free (shielded: a cancelled caller still waits).

        The aborts an event loop sends in one pass (the siblings one cancel stops, the streams
        it closes) are posted as one: the first waits one checkpoint for the others to join it,
        so the step thread cannot take them at two step boundaries.
        """
        loop = anyio.lowlevel.current_token()
        with anyio.CancelScope(shield=True), anyio.move_on_after(ABORT_WAIT_S):
            batch = self._abort_batches.get(loop)
            if batch is not None:
                batch.seq_ids += seq_ids
                await batch.landed.wait()
                return
            batch = self._abort_batches[loop] = _AbortBatch(list(seq_ids))
            try:
                await anyio.lowlevel.checkpoint()
            finally:
                del self._abort_batches[loop]
            try:
                await anyio.to_thread.run_sync(self.abort(batch.seq_ids).wait)
            finally:
                batch.landed.set()

    def wake(self) -> None:
        """A reader caught up: let its stalled sequences run again (any thread)."""
        with self._cond:
            self._wakes += 1
            self._stuck = False
            self._cond.notify()

    async def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the step thread between two steps and return its result (or raise its error).

        Cancelling the caller does not stop ``fn`` once the step thread has taken it; anything that
        must happen after it (freeing a session's blocks) is queued behind it as another call.
        """
        result: T = await self._submit_call(Call(fn, anyio.Event(), anyio.lowlevel.current_token()))
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
        job = Call(unbatched, anyio.Event(), token, batch_fn=batch_fn, item=item, caller=caller_key(caller))
        result: T = await self._submit_call(job)
        return result

    async def _submit_call(self, job: Call) -> Any:
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
                while not self._is_closed and self._nothing_to_do():
                    self._cond.wait()
                if self._is_closed:
                    break
                inbox, self._inbox = self._inbox, _Inbox()
            inbox.calls = self.calls.await_stragglers(
                inbox.calls, self._wait_for_calls, lambda: self._is_closed
            )
            self._apply(inbox)
            if not self.engine.is_idle:
                wakes = self._wakes
                self._sinks.mark_stalled()
                ran = self._step()
                with self._cond:
                    self._stuck = not ran and self._wakes == wakes
        self._shut_down()

    def _shut_down(self) -> None:
        """Fail what runs and what is still queued: a caller never waits on a closed engine.

        Adds, aborts and calls that arrived after the loop's last turn were never applied;
        their callers get an EngineError (an abort's waiter is woken, nothing is left to free).
        """
        self._sinks.fail_all(EngineError("the engine was closed"))
        with self._cond:
            inbox, self._inbox = self._inbox, _Inbox()
        closed = EngineError("the engine was closed before the request started")
        self._sinks.deliver([(sink, closed) for _, sink in inbox.adds])
        for _, done in inbox.aborts:
            done.set()
        for job in inbox.calls:
            job.error = EngineError("the engine was closed")
        finish(inbox.calls)

    def _wait_for_calls(self, deadline: float) -> list[Call] | None:
        """The calls sent until one comes or ``deadline`` passes (a straggler wait); None once it has."""
        with self._cond:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if not self._inbox.calls:
                self._cond.wait(left)
            calls, self._inbox.calls = self._inbox.calls, []
            return calls

    def _closed(self) -> bool:
        return self._is_closed

    def _nothing_to_do(self) -> bool:
        return (self.engine.is_idle or self._stuck) and not self._has_mail()

    def _has_mail(self) -> bool:
        return bool(self._inbox.adds or self._inbox.aborts or self._inbox.calls)

    def _apply(self, inbox: _Inbox) -> None:
        for seqs, sink in inbox.adds:
            self.engine.enqueue(seqs)
            self._sinks.add(seqs, sink)
        for seq_ids, done in inbox.aborts:
            for seq_id in seq_ids:
                self.engine.abort(seq_id)
                self._sinks.discard(seq_id)
            done.set()
        self.calls.run(inbox.calls)

    def _step(self) -> bool:
        """One engine step and its outputs delivered; False when it found nothing to run."""
        try:
            outputs = self.engine.step()
        except Exception as exc:  # a failed step fails its requests, not the engine thread
            self._sinks.fail_all(EngineError(f"engine step failed: {exc!r}"))
            return True
        self._sinks.deliver_step(outputs)
        return bool(outputs)
