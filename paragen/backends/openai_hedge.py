"""Hedged requests over the replica pool: the first replica to stream a token wins.

With ``hedge_after_s`` set (the backend option, or a request's own), an attempt that has
not streamed its first delta within that many seconds (0: at once) is sent, unchanged and
with the same seed, to a second replica. The first of the two to stream a delta (or to
end without one) wins; the other is cancelled: its HTTP response is closed, which makes
the server abort it, and its lease on the replica is given back. What the loser had
streamed before that is counted in the stream's ``usage.hedged_tokens`` (never in its
text or ``completion_tokens``); ``usage.hedges`` counts the copies sent.

A hedge goes to the least busy other replica that is up (none: no hedge). The hedges of
one problem's samples share an affinity key of their own, so they land together and
share that replica's prefix cache, and the problem's own key stays where it was. An
``n > 1`` request is one HTTP stream and is hedged whole: the copy that streams any
choice's first token wins all its choices.

Failures: a primary that fails before the hedge is sent ends the race with its error (the
stream's retry loop takes over, as without hedging). Once both run, one failing leaves the
other to finish; if both fail, the primary's error is raised. A copy that could not
connect marks its replica down (the primary's, by the retry loop, when it is the one raised).
"""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator, Callable
from contextlib import ExitStack
from dataclasses import dataclass

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from paragen.backends.pool import Pool, Replica
from paragen.errors import BackendConnectionError
from paragen.types import Delta, Usage

Attempt = Callable[[Replica, Usage], AsyncGenerator[Delta, None]]
"""One request to a replica, counting into the given usage (HTTPStream._attempt)."""

_COUNTS = ("prompt_tokens", "cached_prompt_tokens", "completion_tokens", "source", "reasoning_tokens")


@dataclass(eq=False, slots=True)
class _Copy:
    """One copy of the request in the race: the primary, or a hedge."""

    replica: Replica
    lease: ExitStack  # its count on the replica's outstanding requests
    usage: Usage  # its own counts until it wins
    deltas: AsyncGenerator[Delta, None]
    first: Delta | None = None
    error: Exception | None = None
    closed: bool = False


class Race:
    """The primary against a hedge, up to the first delta; then the winner's stream."""

    def __init__(
        self, attempt: Attempt, usage: Usage, pool: Pool, delay: float, *, start_tokens: int
    ) -> None:
        self._attempt = attempt
        self._usage = usage  # the stream's: the winner's counts are copied into it
        self._pool = pool
        self._delay = delay
        self._start_tokens = start_tokens  # completion tokens before this attempt (a resumed stream)
        self._copies: list[_Copy] = []
        self._winner: _Copy | None = None

    async def deltas(
        self, primary: Replica, lease: ExitStack, affinity: str | None
    ) -> AsyncGenerator[Delta, None]:
        """The winner's deltas; leaving (or being cancelled) closes every copy still open."""
        try:
            winner = await self._run(self._enter(primary, lease), affinity)
            if winner.first is None:
                return
            self._adopt(winner)
            yield winner.first
            async for delta in winner.deltas:
                self._adopt(winner)
                yield delta
            self._adopt(winner)
        finally:
            with anyio.CancelScope(shield=True):
                for copy in self._copies:
                    await self._close(copy)

    def _enter(self, replica: Replica, lease: ExitStack) -> _Copy:
        usage = self._usage.model_copy()
        copy = _Copy(replica, lease, usage, self._attempt(replica, usage))
        self._copies.append(copy)
        return copy

    async def _run(self, primary: _Copy, affinity: str | None) -> _Copy:
        """Race to the first delta; the losers are cancelled (their responses closed) before it returns."""
        send, receive = anyio.create_memory_object_stream[_Copy](4)
        with send, receive:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_first_delta, primary, send)
                winner = self._winner = await self._settle(tg, receive, send, affinity)
                tg.cancel_scope.cancel()
        for copy in self._copies:
            if copy is not winner:
                await self._close(copy)
        self._mark_down(exclude=None if winner is not None else primary)
        if winner is None:
            assert primary.error is not None
            raise primary.error
        if winner is not primary:
            winner.replica.num_hedges_won += 1
        return winner

    async def _settle(
        self,
        tg: TaskGroup,
        receive: MemoryObjectReceiveStream[_Copy],
        send: MemoryObjectSendStream[_Copy],
        affinity: str | None,
    ) -> _Copy | None:
        """The first copy with a delta (None: every copy failed, or the primary failed unhedged)."""
        pending, hedged = 1, False
        while pending:
            outcome = None
            with anyio.move_on_after(math.inf if hedged else self._delay):
                outcome = await receive.receive()
            if outcome is None:  # no first delta within the delay: hedge
                hedged = True
                copy = self._hedge(affinity)
                if copy is not None:
                    tg.start_soon(_first_delta, copy, send)
                    pending += 1
                continue
            pending -= 1
            if outcome.error is None:
                return outcome
            if not hedged:
                return None
        return None

    def _hedge(self, affinity: str | None) -> _Copy | None:
        """A copy on the least busy other replica that is up, if there is one."""
        primary = self._copies[0].replica
        if not any(r.is_up and r is not primary for r in self._pool.replicas):
            return None
        replica = self._pool.pick(None if affinity is None else f"{affinity}\nhedge", avoid=primary)
        lease = ExitStack()
        lease.enter_context(self._pool.lease(replica))
        self._usage.hedges += 1
        return self._enter(replica, lease)

    async def _close(self, copy: _Copy) -> None:
        """Close a copy's response and lease, once; what a loser streamed is counted as hedged."""
        if copy.closed:
            return
        copy.closed = True
        try:
            await copy.deltas.aclose()
        finally:
            copy.lease.close()
            if copy is not self._winner:
                self._usage.hedged_tokens += max(0, copy.usage.completion_tokens - self._start_tokens)

    def _mark_down(self, exclude: _Copy | None) -> None:
        for copy in self._copies:
            if copy is not exclude and isinstance(copy.error, BackendConnectionError):
                self._pool.mark_down(copy.replica)

    def _adopt(self, winner: _Copy) -> None:
        """Bring the stream's counts up to the winner's (the stream's usage object stays the same)."""
        for name in _COUNTS:
            setattr(self._usage, name, getattr(winner.usage, name))


async def _first_delta(copy: _Copy, send: MemoryObjectSendStream[_Copy]) -> None:
    """Report a copy's first delta, end or error; cancelled, it closes its response."""
    try:
        copy.first = await anext(copy.deltas)
    except StopAsyncIteration:
        pass  # it ended without a delta: done, as good as a first token
    except Exception as exc:  # the race decides what a copy's failure means
        copy.error = exc
    send.send_nowait(copy)
