"""Concurrent child work of a run (coroutines, tool calls, child strategies) in a task group the core owns.

Strategies never create task groups; when a decision needs several things at once (a
planner streaming while its tool calls run, a queue fed while it is read, M sub-strategies
in one round), it asks the context::

    async with ctx.concurrently() as children:
        children.start(call_tool, task)        # runs now, beside the block's own code
    # leaving the block waits for every child; an exception in one cancels the others

``cancel()`` is synchronous, so a monitor callback may stop the children from inside a
fan-out; called before the block is entered, the block starts cancelled.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, TypeVarTuple

import anyio
from anyio.abc import TaskGroup

Args = TypeVarTuple("Args")


class ChildTasks:
    """A group of concurrent children; made by ``RunContext.concurrently()``, used as ``async with``."""

    __slots__ = ("_cancel_reason", "_tg")

    def __init__(self) -> None:
        self._tg: TaskGroup | None = None
        self._cancel_reason: str | None = None

    @property
    def cancelled(self) -> bool:
        return self._cancel_reason is not None

    @property
    def cancel_reason(self) -> str | None:
        return self._cancel_reason

    def start(self, func: Callable[[*Args], Coroutine[Any, Any, Any]], *args: *Args) -> None:
        """Run ``func(*args)`` concurrently with the rest of the block."""
        if self._tg is None:
            raise RuntimeError("start children inside `async with ctx.concurrently() as children:`")
        self._tg.start_soon(func, *args)

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop every child and the block's own code at their next checkpoint."""
        if self._cancel_reason is None:
            self._cancel_reason = reason
        if self._tg is not None:
            self._tg.cancel_scope.cancel()

    async def __aenter__(self) -> ChildTasks:
        if self._tg is not None:
            raise RuntimeError("a ChildTasks block can be entered once")
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        if self._cancel_reason is not None:
            tg.cancel_scope.cancel()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        assert self._tg is not None
        return await self._tg.__aexit__(exc_type, exc, tb)
