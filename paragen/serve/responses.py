"""The two ways a run answers: one JSON body, or a server-sent event stream.

Both run the request inside a task group that also listens for the client going away;
when it does, the group is cancelled, so the run and every sample in it stop and the
backend lets go of them. Admission (the 429 limits) happens here, when the response
starts, so the counted runs are exactly those whose response is being produced.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream
from sse_starlette import EventSourceResponse
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from paragen.serve import replies
from paragen.serve.errors import APIError, internal_error
from paragen.serve.replies import SSE_END
from paragen.serve.routing import Plan
from paragen.serve.service import Service, failure
from paragen.types import StrategyResult

log = logging.getLogger("paragen.serve")


def error_response(exc: APIError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


class Wire(Protocol):
    """One API's answer format: the whole body, or the frames of its event stream (chat and
    completions chunks: :class:`paragen.serve.replies.ChatWire`; the Responses API's events:
    :class:`paragen.serve.responses_api.ResponsesWire`). Frames are whole SSE events, encoded."""

    def answer(self, results: list[StrategyResult]) -> dict[str, Any]: ...

    def opening(self) -> list[bytes]: ...

    def text(self, index: int, text: str) -> bytes: ...

    def reasoning(self, index: int, text: str) -> bytes | None:
        """A frame of thinking (None where the API has no place for it)."""
        ...

    def closing(self, results: list[StrategyResult]) -> list[bytes]: ...

    def failure(self, error: APIError) -> bytes: ...


class RunResponse(Response):
    """A non-streamed answer: run, then send one JSON body (nothing if the client left)."""

    def __init__(self, service: Service, plan: Plan, wire: Wire) -> None:
        super().__init__()
        self.service = service
        self.plan = plan
        self.wire = wire

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
        return JSONResponse(self.wire.answer(results))


class RunStream(EventSourceResponse):
    """A streamed answer: the run's events as SSE comments, then the answer's frames (the wire's).

    The run is the response's data sender, in the task group sse-starlette cancels when the
    client disconnects. Frames (SSE events, already encoded) pass through an unbounded memory
    stream: a run never waits on a slow reader (its events are small and few compared with its
    tokens). Frames that are waiting when the writer comes round go out in one write.
    """

    def __init__(self, service: Service, plan: Plan, wire: Wire, *, events: bool):
        self._send_items, self._receive_items = anyio.create_memory_object_stream[bytes](math.inf)
        super().__init__(_joined(self._receive_items), data_sender_callable=self._produce, ping=15)
        self.service = service
        self.plan = plan
        self.wire = wire
        self.events = events

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
            for frame in self.wire.opening():
                self._put(frame)
            on_event = self._on_event if self.events else None
            try:
                sinks = {"on_text": self._on_text, "on_reasoning": self._on_reasoning}
                results = await self.service.run_all(self.plan, on_event=on_event, **sinks)
                _raise_failure(results)
            except APIError as exc:  # headers are sent: the error goes in the stream, as OpenAI does
                self._put(self.wire.failure(exc))
                return
            except Exception:
                log.exception("run failed")
                self._put(self.wire.failure(internal_error()))
                return
            for frame in self.wire.closing(results):
                self._put(frame)

    def _on_event(self, index: int, event: Any) -> None:
        text = replies.event_comment(index, event)
        if text is not None:
            self._put(b": " + text.encode() + SSE_END)

    def _on_text(self, index: int, text: str) -> None:
        self._put(self.wire.text(index, text))

    def _on_reasoning(self, index: int, text: str) -> None:
        frame = self.wire.reasoning(index, text)
        if frame is not None:
            self._put(frame)

    def _put(self, frame: bytes) -> None:
        # Samples still report their end while a cancelled run unwinds, after the reader is gone.
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            self._send_items.send_nowait(frame)


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
