"""Functions run on the engine's step thread between two steps, one by one or batched.

``AsyncEngine.call`` runs a function there; ``AsyncEngine.call_batched`` runs calls that can share one
batch (shared sessions' forward passes): those waiting together go through their ``batch_fn`` as one
call. ``StepCalls`` is the step thread's side: it runs the calls and batches, and makes a batch wait
briefly for the callers of recent ones, so that sessions whose callers send a little apart stay in
one pass.
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel

from paragen.errors import EngineError

# How long a batch waits for the callers of recent ones: they resend within a few milliseconds of
# their results; one that did other work first would otherwise run one pass behind for good. The
# wait grows with the passes (a tenth of the last one, up to STRAGGLER_MAX_S): on a loaded machine
# the callers' work between two long passes outlasts a fixed few milliseconds, and the sessions
# split into cohorts taking turns.
STRAGGLER_WAIT_S = 0.005
STRAGGLER_SHARE = 0.1
STRAGGLER_MAX_S = 0.05
RECENT_BATCHES = 4  # a batch waits for every caller of the last few (or as many as the largest had)

BatchFn = Callable[[list[Any]], list[Any]]


@dataclass(slots=True)
class Call:
    """A function to run on the step thread, and where its outcome goes."""

    fn: Callable[[], Any]
    done: anyio.Event
    token: anyio.lowlevel.EventLoopToken
    result: Any = None
    error: BaseException | None = None
    # Set for call_batched: the items of all waiting calls with the same batch_fn go in one call.
    batch_fn: BatchFn | None = None
    item: Any = None
    caller: int | None = None  # who sent it (id of the caller's object), when it said


class StepCalls:
    """Runs calls and batches on the step thread; remembers recent batches' callers to wait for them."""

    def __init__(self, *, merge_batched_calls: bool = True) -> None:
        # False runs each batched call alone (the A/B switch of benchmarks/hogwild_sessions.py).
        self.merge_batched_calls = merge_batched_calls
        # The callers of the last few batches (None: one that did not say who it is).
        self._recent: collections.deque[list[int | None]] = collections.deque(maxlen=RECENT_BATCHES)
        self._last_batch_s = 0.0

    def await_stragglers(
        self,
        calls: list[Call],
        wait_for: Callable[[float], list[Call] | None],
        is_closed: Callable[[], bool],
    ) -> list[Call]:
        """The calls to run now: ``calls``, or after a brief wait until as many batched calls wait as
        recent batches had callers, the batched ones (``wait_for(deadline)``: calls sent meanwhile,
        None once the deadline has passed).

        The other calls, ``calls``' and those that arrive meanwhile, run at once (a session's step
        boundary: fold, free, new segment, a round trip each), each starting the wait over, so that
        session still makes this batch. Running them first is safe: a session has one call in flight,
        and a cleanup that overtakes a cancelled caller's queued forward only makes that forward fail
        (its session is closed) before it writes anything.
        """
        expected = self.expected_callers()
        num_batched = sum(job.batch_fn is not None for job in calls)
        if not self.merge_batched_calls or not 0 < num_batched < expected:
            return calls
        wait = min(max(STRAGGLER_WAIT_S, STRAGGLER_SHARE * self._last_batch_s), STRAGGLER_MAX_S)
        started = time.monotonic()
        deadline = started + wait
        arrived: list[Call] | None = calls
        batched: list[Call] = []
        while arrived is not None:
            for job in arrived:
                if job.batch_fn is not None:
                    batched.append(job)
                    continue
                self.run_call(job)
                # Its caller is at a step boundary, a round trip or two from its next pass: the wait
                # starts over (within STRAGGLER_MAX_S), else each of its calls waited a whole pass.
                deadline = max(deadline, min(time.monotonic() + wait, started + STRAGGLER_MAX_S))
            if len(batched) >= expected or is_closed():
                break
            arrived = wait_for(deadline)
        return batched

    def expected_callers(self) -> int:
        """How many batched calls a batch waits for: every caller of the recent batches that said who
        it is (one that missed the last one, at a step boundary, included), and as many others as the
        largest of them had."""
        named = {caller for batch in self._recent for caller in batch if caller is not None}
        anonymous = max((sum(caller is None for caller in batch) for batch in self._recent), default=0)
        return len(named) + anonymous

    def run(self, calls: list[Call]) -> None:
        """Batched calls first, merged per batch_fn: a session has one call waiting at a time, so this
        reorders only different sessions' calls (and a cancelled call's cleanup, which then still runs
        after it); then the others, in order."""
        batches: dict[BatchFn, list[Call]] = {}
        for job in calls:
            if job.batch_fn is not None:
                batches.setdefault(job.batch_fn, []).append(job)
        if batches:
            self._recent.append([job.caller for job in max(batches.values(), key=len)])
        started = time.monotonic()
        for batch_fn, jobs in batches.items():
            groups = [jobs] if self.merge_batched_calls else [[job] for job in jobs]
            for group in groups:
                self.run_batch(batch_fn, group)
        if batches:
            self._last_batch_s = time.monotonic() - started
        for job in calls:
            if job.batch_fn is None:
                self.run_call(job)

    def run_call(self, job: Call) -> None:
        try:
            job.result = job.fn()
        except Exception as exc:  # the caller gets it as an EngineError; the step thread goes on
            job.error = engine_error(exc)
        finish([job])

    def run_batch(self, batch_fn: BatchFn, jobs: list[Call]) -> None:
        try:
            outcomes = batch_fn([job.item for job in jobs])
        except Exception as exc:  # the whole batch failed: every caller gets the error
            outcomes = [engine_error(exc) for _ in jobs]
        for job, outcome in zip(jobs, outcomes, strict=True):
            if isinstance(outcome, EngineError):
                job.error = outcome
            else:
                job.result = outcome
        finish(jobs)


def finish(jobs: list[Call]) -> None:
    """Wake the calls' callers. One hop per event loop: its callers all wake in one loop iteration,
    so they send their next batched calls together (a hop per call would wake them one pass apart)."""
    per_loop: dict[anyio.lowlevel.EventLoopToken, list[anyio.Event]] = defaultdict(list)
    for job in jobs:
        per_loop[job.token].append(job.done)
    for token, events in per_loop.items():
        with contextlib.suppress(Exception):  # the caller's event loop is gone: nobody waits
            anyio.from_thread.run_sync(_set_all, events, token=token)


def _set_all(events: list[anyio.Event]) -> None:
    for event in events:
        event.set()


def engine_error(exc: Exception) -> EngineError:
    if isinstance(exc, EngineError):
        return exc
    error = EngineError(f"engine call failed: {exc!r}")
    error.__cause__ = exc
    return error


def caller_key(caller: object) -> int | None:
    return None if caller is None else id(caller)


def unbatched() -> None:
    raise AssertionError("a batched call runs through its batch_fn")
