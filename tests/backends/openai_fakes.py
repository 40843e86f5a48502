"""A fake OpenAI-compatible server inside an httpx.MockTransport, and chunk builders."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import anyio
import httpx

Event = str | dict[str, Any] | BaseException


class FakeSSE(httpx.AsyncByteStream):
    """An SSE body that can pause, break mid-way, and tells whether the client closed it."""

    def __init__(self, events: list[Event], delay: float = 0.0) -> None:
        self.events = events
        self.delay = delay
        self.closed = False
        self.sent = 0
        self._bodies: list[AsyncGenerator[bytes, None]] = []

    def __aiter__(self) -> AsyncIterator[bytes]:
        body = self.body()
        self._bodies.append(body)
        return body

    async def body(self) -> AsyncGenerator[bytes, None]:
        for event in self.events:
            if self.delay:
                await anyio.sleep(self.delay)
            if isinstance(event, BaseException):
                raise event
            data = event if isinstance(event, str) else json.dumps(event)
            self.sent += 1
            yield f"data: {data}\n\n".encode()

    async def aclose(self) -> None:
        # Closing the body closes its generator too, as a transport's stream should (left to the
        # garbage collector, trio reports an unexhausted generator as a ResourceWarning).
        self.closed = True
        for body in self._bodies:
            await body.aclose()


Reply = Callable[[httpx.Request], httpx.Response]


class FakeServer:
    """An OpenAI-compatible server inside an httpx.MockTransport.

    Generation requests are answered from ``replies`` in order (then ``default``);
    every request is kept in ``requests`` (and its JSON body in ``bodies``).
    """

    def __init__(self, owned_by: str = "vllm", model: str = "m") -> None:
        self.owned_by = owned_by
        self.model = model
        self.requests: list[httpx.Request] = []
        self.bodies: list[dict[str, Any]] = []
        self.replies: deque[Reply] = deque()
        self.streams: list[FakeSSE] = []
        self.default: Reply = lambda request: self.sse(
            [chunk("hi", finish="stop"), usage_chunk(3, 1), "[DONE]"]
        )

    def sse(self, events: list[Event], delay: float = 0.0) -> httpx.Response:
        stream = FakeSSE(events, delay)
        self.streams.append(stream)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path
        if path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": self.model, "owned_by": self.owned_by}]})
        if path.endswith("/tokenize"):
            return httpx.Response(200, json={"count": 7, "tokens": list(range(7))})
        if path.endswith("/abort_request"):
            return httpx.Response(200, json={})
        self.bodies.append(json.loads(request.content))
        reply = self.replies.popleft() if self.replies else self.default
        return reply(request)

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handler)

    def generation_requests(self) -> list[httpx.Request]:
        return [r for r in self.requests if r.url.path.endswith("completions")]


def chunk(text: str, *, index: int = 0, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    """A /v1/completions stream chunk."""
    choice = {"index": index, "text": text, "logprobs": None, "finish_reason": finish, **extra}
    return {"id": "c", "object": "text_completion", "choices": [choice], "usage": None}


def chat_chunk(
    content: str | None, *, index: int = 0, finish: str | None = None, **extra: Any
) -> dict[str, Any]:
    """A /v1/chat/completions stream chunk."""
    choice = {"index": index, "delta": {"content": content}, "finish_reason": finish, **extra}
    return {"id": "c", "object": "chat.completion.chunk", "choices": [choice]}


def usage_chunk(prompt: int, completion: int, cached: int | None = None) -> dict[str, Any]:
    """The last chunk when include_usage is asked for: no choices, only usage."""
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return {"id": "c", "choices": [], "usage": usage}
