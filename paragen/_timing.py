"""Waiting for a moment on the event loop, to the millisecond or closer (the scripted fakes' latencies)."""

from __future__ import annotations

import time

import anyio
import anyio.lowlevel

# asyncio hands epoll its timeout in whole milliseconds, rounded up, so a sleep on the event loop's
# timer ends up to 1 ms after its deadline (docs/strategies.md has the average), where a served
# reply wakes the loop on its socket at once. A precise fake sleeps on the timer until this long
# before the deadline, then yields until the deadline has passed.
_TIMER_SLACK = 0.002


async def sleep_until(deadline: float, *, precise: bool = False) -> None:
    """Return at ``deadline`` (a ``time.perf_counter()`` time) or just after; always a checkpoint.

    On the event loop's timer alone (``precise=False``) that is up to a millisecond late. With
    ``precise`` the last ``_TIMER_SLACK`` seconds are spent yielding to the loop, one checkpoint
    after another: the wait ends within one pass of the loop of its deadline, and the loop spins
    meanwhile, which can only slow the code that runs beside it, never speed it up.
    """
    delay = deadline - time.perf_counter()
    if not precise:
        await anyio.sleep(max(0.0, delay))
        return
    if delay > _TIMER_SLACK:
        await anyio.sleep(delay - _TIMER_SLACK)
    await anyio.lowlevel.checkpoint()
    while time.perf_counter() < deadline:  # the spin is the point: no timer fires this close to the deadline
        await anyio.lowlevel.checkpoint()
