"""The two ways a run answers: one JSON body, or a server-sent event stream.

Both run the request inside a task group that also listens for the client going away;
when it does, the group is cancelled, so the run and every sample in it stop and the
backend lets go of them. Admission (the 429 limits) happens here, when the response
starts, so the counted runs are exactly those whose response is being produced.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream
from sse_starlette import EventSourceResponse
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from paragen.serve import render
from paragen.serve.errors import APIError, internal_error
from paragen.serve.routing import Plan
from paragen.serve.service import Service, failure
from paragen.types import StrategyResult

log = logging.getLogger("paragen.serve")


def error_response(exc: APIError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


class RunResponse(Response):
    """A non-streamed answer: run, then send one JSON body (nothing if the client left)."""

    def __init__(self, service: Service, plan: Plan, include_result: bool) -> None:
        super().__init__()
        self.service = service
        self.plan = plan
        self.include_result = include_result

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        answer: Response | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_on_disconnect, receive, tg.cancel_scope)
            answer = await _guarded(self._answer)
            tg.cancel_scope.cancel()
        if answer is not None:  # None: the client went away and the run was cancelled
            await answer(scope, receive, send)

    async def _answer(self) -> Response:
        with self.service.admit(self.plan):
            results = await self.service.run_all(self.plan)
        _raise_failure(results)
        created = int(time.time())
        return JSONResponse(render.completion(self.plan, results, created, self.include_result))


class RunStream(EventSourceResponse):
    """A streamed answer: the run's events as SSE comments, then the answer as chunks, then [DONE].

    The run is the response's data sender, in the task group sse-starlette cancels when the
    client disconnects. Frames (SSE events, already encoded) pass through an unbounded memory
    stream: a run never waits on a slow reader (its events are small and few compared with its
    tokens). Frames that are waiting when the writer comes round go out in one write.
    """

    def __init__(
        self, service: Service, plan: Plan, *, include_usage: bool, include_result: bool, events: bool
    ):
        self._send_items, self._receive_items = anyio.create_memory_object_stream[bytes](math.inf)
        super().__init__(_joined(self._receive_items), data_sender_callable=self._produce, ping=15)
        self.service = service
        self.plan = plan
        self.include_usage = include_usage
        self.include_result = include_result
        self.events = events
        self.created = int(time.time())
        self._content = [render.ContentChunks(plan, self.created, i) for i in range(plan.choices)]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            admission = self.service.admit(self.plan)
            admission.__enter__()
        except APIError as exc:  # nothing sent yet: a plain error answer with its status
            self._close_items()
            await error_response(exc)(scope, receive, send)
            return
        try:
            await super().__call__(scope, receive, send)
        finally:
            admission.__exit__(None, None, None)
            self._close_items()

    def _close_items(self) -> None:
        self._send_items.close()
        self._receive_items.close()

    async def _produce(self) -> None:
        async with self._send_items:
            for index in range(self.plan.choices):
                self._data(render.chunk(self.plan, self.created, index, role=True))
            on_event = self._on_event if self.events else None
            try:
                results = await self.service.run_all(self.plan, on_event=on_event, on_text=self._on_text)
                _raise_failure(results)
            except APIError as exc:  # headers are sent: the error goes in the stream, as OpenAI does
                self._data(json.dumps(exc.body()))
                return
            except Exception:
                log.exception("run failed")
                self._data(json.dumps(internal_error().body()))
                return
            self._finish(results)

    def _finish(self, results: list[StrategyResult]) -> None:
        plan, created = self.plan, self.created
        for index, result in enumerate(results):
            text = render.answer_text(result)
            if plan.strategy_name is not None and (text or not result.tool_calls):
                self._data(render.chunk(plan, created, index, text=text))  # a pass-through's has streamed
            if result.tool_calls:
                calls = render.stream_tool_calls(result)
                self._data(render.chunk(plan, created, index, tool_calls=calls))
            ext = render.choice_extension(plan, result, self.include_result)
            reason = render.finish_reason(plan, result)
            self._data(render.chunk(plan, created, index, finish=reason, extension=ext))
        if self.include_usage:
            self._data(render.usage_chunk(plan, created, results))
        self._data("[DONE]")

    def _on_event(self, index: int, event: Any) -> None:
        text = render.event_comment(index, event)
        if text is not None:
            self._put(b": " + text.encode() + _END)

    def _on_text(self, index: int, text: str) -> None:
        self._data(self._content[index](text))

    def _data(self, data: str) -> None:
        self._put(b"data: " + data.encode() + _END)

    def _put(self, frame: bytes) -> None:
        # Samples still report their end while a cancelled run unwinds, after the reader is gone.
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            self._send_items.send_nowait(frame)


# One SSE event is "data: TEXT" (or ": TEXT", a comment) and a blank line, as sse-starlette writes it.
# Every text sent here is JSON (or [DONE]), which has no line break, so it is one line as it is.
_END = b"\r\n\r\n"


async def _joined(frames: MemoryObjectReceiveStream[bytes]) -> AsyncIterator[bytes]:
    """The frames as they come; those already waiting are joined into one write."""
    async for first in frames:
        batch = [first]
        with contextlib.suppress(anyio.WouldBlock, anyio.EndOfStream):
            while True:
                batch.append(frames.receive_nowait())
        yield b"".join(batch)


async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return


async def _guarded(answer: Callable[[], Awaitable[Response]]) -> Response:
    """The answer, or the error answer it raised; a bug is logged and answered as a bare 500."""
    try:
        return await answer()
    except APIError as exc:
        return error_response(exc)
    except Exception:
        log.exception("request failed")
        return error_response(internal_error())


def _raise_failure(results: list[StrategyResult]) -> None:
    for result in results:
        problem = failure(result)
        if problem is not None:
            raise problem
