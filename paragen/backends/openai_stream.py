"""One streaming request of the OpenAI backend: retries, failover and resumption.

Before the first delta a failed attempt is simply retried (on another replica where
the pool has one). After it, a retry would duplicate text the caller has seen, so a
single-choice request whose replica died mid-stream is *resumed* instead: the text so
far goes back as the prompt (completions) or as a prefilled assistant message (chat, on
servers that continue one), with ``max_tokens`` cut by the tokens already produced. The
sample goes on where it stopped and every token is counted once.

The text so far is the raw one, thinking included: thinking the server sent apart is written
back inside the family's delimiters (``paragen.reasoning.join_thinking``), open where the cut
came mid-thought, so the sample goes on thinking, and a sample cut mid-answer keeps its
thought. On vLLM such a continuation is a raw completion of the server-rendered prompt
(:mod:`paragen.backends.openai_render`), whose output comes back as text: the rest of a thought
is split from it again (``ThoughtSplitter``), as the server's parser would have sent it. The
thinking tokens streamed before the cut are added to what the continuation reports or splits.
"""

from __future__ import annotations

import contextlib
import math
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import ExitStack, aclosing
from types import TracebackType
from typing import Any, Protocol

import anyio
import httpx
from httpx_sse import EventSource

from paragen import tracing
from paragen.backends.base import CompletionStream
from paragen.backends.openai_config import OpenAIConfig, ServerInfo
from paragen.backends.openai_hedge import Race
from paragen.backends.openai_http import map_http_errors, raise_for_status, redacting, retry_delay
from paragen.backends.openai_render import ThoughtSplitter, raw_continuation, renders_raw
from paragen.backends.openai_wire import ChunkParser, Endpoint, WireOptions, build_body
from paragen.backends.pool import Pool, Replica
from paragen.errors import BackendConnectionError, BackendError, ConfigError
from paragen.reasoning import DELIMITERS, after_prefill, join_thinking, prefill_of
from paragen.types import ChatMessage, Delta, GenerateRequest, Usage


class StreamOwner(Protocol):
    """What a stream needs of its backend (an OpenAIBackend; a protocol, so neither imports the other)."""

    config: OpenAIConfig
    pool: Pool

    @property
    def client(self) -> httpx.AsyncClient: ...

    async def check_health(self) -> None: ...

    async def server_info(self, replica: Replica) -> ServerInfo: ...

    def endpoint_for(self, request: GenerateRequest) -> Endpoint: ...

    async def count_prompt(self, text: str) -> tuple[int, str]: ...


_SSE_HEADERS = {"Accept": "text/event-stream"}


class StreamContext:
    """What ``stream()`` returns: the stream on entry; on exit, the request is closed."""

    def __init__(self, backend: StreamOwner, request: GenerateRequest) -> None:
        self._backend = backend
        self._request = request
        self._stream: HTTPStream | None = None

    async def __aenter__(self) -> CompletionStream:
        # No I/O here: the probe and the request happen on first iteration, inside the retry loop.
        self._stream = HTTPStream(self._backend, self._request)
        return self._stream

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._stream is not None:
            await self._stream.aclose()


class HTTPStream:
    """One request's deltas, with retries, failover, resumption and live usage."""

    def __init__(self, backend: StreamOwner, request: GenerateRequest) -> None:
        self.usage = Usage()
        self._backend = backend
        self._request = request
        self._texts: list[str] = []  # what the caller has seen (single-choice requests)
        self._thoughts: list[str] = []  # the thinking of it that the server sent apart
        self._num_thought_tokens = 0  # the tokens of the pieces that carried thinking
        self._num_seen = 0  # deltas handed out
        self._deltas = self._iterate()

    def __aiter__(self) -> AsyncIterator[Delta]:
        return self._deltas

    async def abort(self, index: int) -> None:
        """Stop the choice; only possible for a single-choice request (it closes the response)."""
        if self._request.n != 1 or index != 0:
            raise ConfigError("an n > 1 HTTP request cannot abort one choice", hint="send n=1 requests")
        await self.aclose()

    async def aclose(self) -> None:
        await self._deltas.aclose()

    async def _iterate(self) -> AsyncGenerator[Delta, None]:
        config, pool = self._backend.config, self._backend.pool
        attempt, avoid = 0, None
        while True:
            await self._backend.check_health()
            replica = pool.pick(self._request.affinity, avoid)
            try:
                # Outstanding from the pick on, so requests picked together see each other.
                with ExitStack() as lease:
                    lease.enter_context(pool.lease(replica))
                    async with aclosing(self._attempts(replica, lease)) as deltas:
                        async for delta in deltas:
                            self._seen(delta)
                            yield delta
                if not self.usage.prompt_tokens:
                    await self._count_prompt()
                return
            except BackendError as exc:
                if isinstance(exc, BackendConnectionError):
                    pool.mark_down(replica)
                delay = retry_delay(exc, attempt, config.backoff, config.max_backoff)
                if attempt >= config.max_retries or delay is None or not self._can_resume(replica):
                    raise
            attempt, avoid = attempt + 1, replica
            await anyio.sleep(delay)

    def _seen(self, delta: Delta) -> None:
        self._num_seen += 1
        self._texts.append(delta.text)
        if delta.reasoning:  # a piece's tokens are the thinking's when it carries some
            self._thoughts.append(delta.reasoning)
            self._num_thought_tokens += delta.num_tokens

    def _attempts(self, replica: Replica, lease: ExitStack) -> AsyncGenerator[Delta, None]:
        """One attempt on ``replica``, or a race of it and a hedge on another (see openai_hedge)."""
        delay = self._request.hedge_after_s
        delay = self._backend.config.hedge_after_s if delay is None else delay
        if delay is None or math.isinf(delay) or len(self._backend.pool) < 2:
            return self._attempt(replica, self.usage)
        start = self.usage.completion_tokens if self._num_seen else 0
        race = Race(self._attempt, self.usage, self._backend.pool, delay, start_tokens=start)
        return race.deltas(replica, lease, self._request.affinity)

    async def _count_prompt(self) -> None:
        """Count the prompt where the whole stream said nothing of it (llama-cpp-python streams no
        usage): with the server's tokenizer where it has one; a chat prompt's count leaves out its
        template's tokens, so it is an estimate. A caller that leaves at the last delta skips this."""
        request = self._request
        if request.messages is None:
            count, source = await self._backend.count_prompt(request.prompt or "")
        else:
            count, _ = await self._backend.count_prompt("\n".join(m.content for m in request.messages))
            source = "estimate"
        self.usage.prompt_tokens = count * request.n
        if source == "estimate":
            self.usage.source = "estimate"

    def _can_resume(self, failed: Replica) -> bool:
        """Whether another attempt can go on without repeating what the caller has seen."""
        if not self._num_seen:
            return True
        if self._request.n != 1 or self.usage.completion_tokens >= self._request.params.max_tokens:
            return False
        if self._request.messages is None:
            return True
        # A chat reply goes on as a prefilled assistant message: only where a server continues one.
        others = [r for r in self._backend.pool.replicas if r is not failed] or [failed]
        return any(r.info is not None and r.info.kind in ("vllm", "sglang") for r in others)

    def _current_request(self) -> GenerateRequest:
        """The request itself, or after a cut-off its continuation from the text seen so far."""
        request = self._request
        if not self._num_seen:
            return request
        text = self._written()
        left = request.params.max_tokens - self.usage.completion_tokens
        params = request.params.model_copy(update={"max_tokens": left})
        if request.messages is None:
            return request.model_copy(update={"prompt": (request.prompt or "") + text, "params": params})
        messages = list(request.messages)
        if request.continue_final:
            last = messages.pop()
            text = last.content + text
        messages.append(ChatMessage(role="assistant", content=text))
        update = {"messages": tuple(messages), "continue_final": True, "params": params}
        return request.model_copy(update=update)

    def _written(self) -> str:
        """The raw text the model has written so far, its thinking in the family's delimiters."""
        request, answer = self._request, "".join(self._texts)
        fmt = self._backend.config.thinking
        family = fmt if fmt in DELIMITERS else "think"  # a server's split is written back as <think>
        prefill = prefill_of(request)
        if not self._thoughts:
            # A chat turn of a family whose template opens the thought: the reply prefilled for the
            # continuation is rendered without that generation prompt, so it opens the thought itself.
            return DELIMITERS[family].open + answer if fmt == "think_open" and prefill is None else answer
        text = join_thinking("".join(self._thoughts), answer, "closed" if answer else "open", family)
        return after_prefill(text, prefill, family)

    def _resplitter(self) -> ThoughtSplitter | None:
        """A splitter for a continuation of a thought the server had been sending apart, still open."""
        if not self._thoughts or any(self._texts):
            return None
        return ThoughtSplitter(self._backend.config.thinking)

    def _base(self) -> Usage | None:
        """A resumed attempt's counts before it: the server's reasoning_tokens then add to the
        thinking tokens already streamed (none before a first delta: the attempt starts over)."""
        if not self._num_seen:
            return None
        base = self.usage.model_copy()
        if base.reasoning_tokens is None and self._thoughts:
            base.reasoning_tokens = self._num_thought_tokens
        return base

    async def _attempt(self, replica: Replica, usage: Usage) -> AsyncGenerator[Delta, None]:
        """One request to ``replica``; its counts go to ``usage`` (the stream's, or a hedge race's own)."""
        info = await self._backend.server_info(replica)
        request = self._current_request()
        rendered = renders_raw(request, info, self._backend.config)
        if rendered:
            request = await raw_continuation(
                self._backend.client, replica, info, request, self._backend.config
            )
        url, body, rid = self._prepare(replica, info, request, usage)
        if rendered:
            body["add_special_tokens"] = False  # the rendered template already holds its BOS
        base = self._base()
        parser = ChunkParser(self._backend.endpoint_for(request), usage, num_choices=request.n, base=base)
        # A thought the server sent apart, cut mid-way and continued raw, comes back as text.
        splitter = self._resplitter() if rendered else None
        thought_before = 0 if base is None else base.reasoning_tokens or 0
        if rendered and base is not None:
            usage.reasoning_tokens = base.reasoning_tokens  # a raw completion's usage reports none
        client = self._backend.client
        response: httpx.Response | None = None
        tracer, failure = tracing.active, None
        span = None if tracer is None else tracer.request(_operation(url), info.model, url, request)
        try:
            with map_http_errors(url):
                headers = _SSE_HEADERS if span is None else span.headers(_SSE_HEADERS)  # W3C traceparent
                http_request = client.build_request("POST", url, json=body, headers=headers)
                response = await client.send(http_request, stream=True)
            with map_http_errors(url), redacting(response.request):
                await raise_for_status(response)
                async with aclosing(EventSource(response).aiter_sse()) as events:
                    async for event in events:
                        if event.data == "[DONE]":
                            parser.saw_done = True
                            break
                        for delta in parser.parse(event.data):
                            if splitter is not None:
                                delta = splitter.split(delta)
                                usage.reasoning_tokens = thought_before + splitter.thought_tokens
                                if splitter.done:
                                    splitter = None  # the rest is answer, passed on as it comes
                            yield delta
            if not parser.is_done:
                raise BackendConnectionError(f"{url}: the stream ended before the completion did")
        except BackendError as exc:
            replica.num_errors += 1  # shown per replica on paragen serve's /metrics
            failure = exc
            raise
        finally:
            if response is not None:
                await _close(response, self._backend, replica, None if parser.is_done else rid)
            if span is not None:
                span.ended(usage, failure)

    def _prepare(
        self, replica: Replica, info: ServerInfo, request: GenerateRequest, usage: Usage
    ) -> tuple[str, dict[str, Any], str | None]:
        """The URL, body and SGLang request id of one attempt; a fresh attempt's usage starts over."""
        if request.n > 1 and not info.native_n:
            hint = "send n=1 requests (see capabilities.native_n)"
            raise ConfigError(f"{replica.url} does not accept n > 1", hint=hint)
        endpoint = self._backend.endpoint_for(request)
        rid = f"{request.request_id}-{uuid.uuid4().hex[:8]}" if info.kind == "sglang" else None
        config = self._backend.config
        options = WireOptions(
            info.model,
            endpoint,
            kind=info.kind,
            continuous_usage=info.continuous_usage,
            rid=rid,
            thinking_budget=config.thinking_token_budget,
        )
        body = {**build_body(request, options), **config.server_knobs(), **config.extra_body}
        if not self._num_seen:
            usage.prompt_tokens, usage.completion_tokens, usage.source = 0, 0, "none"
            usage.cached_prompt_tokens = None
        url = f"{replica.url}/{'chat/completions' if endpoint == 'chat' else 'completions'}"
        return url, body, rid


def _operation(url: str) -> str:
    """The GenAI operation name of a request to ``url``."""
    return "chat" if url.endswith("/chat/completions") else "text_completion"


async def _close(response: httpx.Response, backend: StreamOwner, replica: Replica, rid: str | None) -> None:
    """Close the response even while being cancelled: closing it is what aborts the request."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(5):
        await response.aclose()
        if rid is not None:  # SGLang: also say so explicitly, by request id
            # Best effort: the closed connection has already told the server.
            with contextlib.suppress(httpx.HTTPError):
                await backend.client.post(f"{replica.root}/abort_request", json={"rid": rid}, timeout=2.0)
