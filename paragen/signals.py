"""SIGTERM as a cancellation: the run unwinds, its backend closes, then the command exits 143.

Python's default SIGTERM ends the process on the spot and no ``finally`` runs. An in-process
vLLM engine then outlives ``paragen eval``: its engine-core and worker processes are left
orphaned, still decoding and deaf to SIGTERM. SIGINT already unwinds through asyncio's
cancellation; this gives SIGTERM (what ``kill``, systemd and job schedulers send) the same path.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import anyio.abc

T = TypeVar("T")


class Terminated(Exception):
    """The process was asked to stop (SIGTERM) and has cleaned up; what was written stands."""

    exit_code = 128 + signal.SIGTERM


async def until_terminated(main: Callable[[], Awaitable[T]]) -> T:
    """Await ``main()``; on SIGTERM cancel it (its ``finally`` blocks run), then raise Terminated."""
    error: Exception | None = None
    results: list[T] = []

    async def watch(scope: anyio.CancelScope, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM) as signals:
            task_status.started()  # the handler is in place before main starts
            async for _ in signals:
                scope.cancel()
                return

    async with anyio.create_task_group() as group:
        await group.start(watch, group.cancel_scope)
        try:
            results.append(await main())
        except Exception as exc:  # re-raised below as itself, not wrapped in the group's ExceptionGroup
            error = exc
        finally:
            group.cancel_scope.cancel()
    if error is not None:
        raise error
    if not results:  # cancelled: only the watcher cancels this group
        raise Terminated("stopped by SIGTERM; the backend was closed and what was recorded is kept")
    return results[0]
