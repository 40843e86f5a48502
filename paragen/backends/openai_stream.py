"""One streaming request of the OpenAI backend, in layers with one concern each.

Read top-down, as httpx's ``send`` (auth, then redirects, then one request):

- :meth:`HTTPStream._iterate`: **retry** with backoff, and **failover**: each try goes to a
  replica other than the one that just failed (:meth:`~HTTPStream._pick`); whether a failure
  ends the stream is :meth:`~HTTPStream._retry_delay`'s. It notes each delta the caller gets
  in the stream's :class:`~paragen.backends.openai_resume.Transcript`.
- :meth:`HTTPStream._hedged`: **hedging**: one attempt, or a race of it and a copy on another
  replica (:mod:`paragen.backends.openai_hedge`).
- :meth:`HTTPStream._attempt`: **one attempt**: what to send, then one HTTP exchange read into
  deltas. What to send (:meth:`~HTTPStream._call`) is the request, or after a cut its
  continuation (**resume**, :mod:`paragen.backends.openai_resume`), as a raw completion where
  vLLM's chat template would rewrite it (:mod:`paragen.backends.openai_render`), whose thought
  is split again as it is parsed (**thought re-split**, ``Resplit``).
- :func:`_traced`: **tracing**: the attempt as a client span, its traceparent in the headers.
- :func:`_exchange`: the POST, its status, its events; closing the response aborts the request.

Per chunk, only two generators run (:meth:`~HTTPStream._iterate` and
:meth:`~HTTPStream._attempt`; a hedged race adds its own): the other layers run once per attempt.
"""

from __future__ import annotations

import contextlib
import math
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from contextlib import ExitStack, aclosing, asynccontextmanager, contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

import anyio
import httpx
from httpx_sse import EventSource, ServerSentEvent

from paragen import tracing
from paragen.backends.base import CompletionStream
from paragen.backends.openai_config import OpenAIConfig, ServerInfo
from paragen.backends.openai_hedge import Race
from paragen.backends.openai_http import map_http_errors, raise_for_status, redacting, retry_delay
from paragen.backends.openai_render import Resplit, raw_continuation, renders_raw
from paragen.backends.openai_resume import Transcript
from paragen.backends.openai_wire import ChunkParser, Endpoint, WireOptions, build_body
from paragen.backends.pool import Pool, Replica
from paragen.backends.routing import routing_headers
from paragen.errors import BackendConnectionError, BackendError, ConfigError
from paragen.types import Delta, GenerateRequest, Usage


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


@dataclass(slots=True)
class _Call:
    """What one attempt sends, and how its events are read."""

    url: str
    body: dict[str, Any]
    rid: str | None  # SGLang's request id, to abort it by
    model: str
    request: GenerateRequest  # as sent: the request, its continuation, or that rendered raw
    parser: ChunkParser
    parse: Callable[[str], list[Delta]]  # the parser's, or a Resplit's around it


class HTTPStream:
    """One request's deltas, with retries, failover, resumption and live usage."""

    def __init__(self, backend: StreamOwner, request: GenerateRequest) -> None:
        self.usage = Usage()
        self._backend = backend
        self._request = request
        self._transcript = Transcript(request, backend.config.thinking.format)
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

    # --- retry and failover ---------------------------------------------------------------------

    async def _iterate(self) -> AsyncGenerator[Delta, None]:
        """Tries until one ends, each leased on its replica from the pick on (so requests picked
        together see each other); between tries, the wait that :meth:`_retry_delay` gives."""
        tries, failed = 0, None
        record = self._transcript.record
        while True:
            replica = await self._pick(failed)
            try:
                with ExitStack() as lease:
                    lease.enter_context(self._backend.pool.lease(replica))
                    async with aclosing(self._hedged(replica, lease)) as deltas:
                        async for delta in deltas:
                            record(delta)
                            yield delta
                if not self.usage.prompt_tokens:
                    await self._count_prompt()
                return
            except BackendError as exc:
                delay = self._retry_delay(exc, tries, replica)
                if delay is None:
                    raise
            tries, failed = tries + 1, replica
            await anyio.sleep(delay)

    async def _pick(self, failed: Replica | None) -> Replica:
        """The next try's replica: another than the one that ``failed`` where the pool has one,
        after taking back the down replicas that answer again."""
        await self._backend.check_health()
        return self._backend.pool.pick(self._request.affinity, failed)

    def _retry_delay(self, exc: BackendError, tries: int, replica: Replica) -> float | None:
        """The wait before the next try after ``exc`` on ``replica``, or None: ``exc`` ends the stream.

        A replica that could not be reached is marked down. A stream the caller has seen part of
        goes on only where it can be resumed (:meth:`Transcript.can_resume`)."""
        pool, config = self._backend.pool, self._backend.config
        if isinstance(exc, BackendConnectionError):
            pool.mark_down(replica)
        delay = retry_delay(exc, tries, config.backoff, config.max_backoff)
        if tries >= config.max_retries or delay is None:
            return None
        others = [r for r in pool.replicas if r is not replica] or [replica]
        return delay if self._transcript.can_resume(self.usage, others) else None

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

    # --- hedging --------------------------------------------------------------------------------

    def _hedged(self, replica: Replica, lease: ExitStack) -> AsyncGenerator[Delta, None]:
        """One attempt on ``replica``, or a race of it and a hedge on another (see openai_hedge)."""
        config, pool = self._backend.config, self._backend.pool
        delay = self._request.hedge_after_s
        delay = config.hedge_after_s if delay is None else delay
        if delay is None or math.isinf(delay) or len(pool) < 2:
            return self._attempt(replica, self.usage)
        start = self.usage.completion_tokens if self._transcript.num_seen else 0
        race = Race(self._attempt, self.usage, pool, delay, start_tokens=start)
        return race.deltas(replica, lease, self._request.affinity)

    # --- one attempt ----------------------------------------------------------------------------

    async def _attempt(self, replica: Replica, usage: Usage) -> AsyncGenerator[Delta, None]:
        """One request to ``replica``; its counts go to ``usage`` (the stream's, or a hedge race's own)."""
        call = await self._call(replica, usage)
        parser, parse = call.parser, call.parse
        try:
            with _traced(call, usage) as traced:
                headers = {**traced, **routing_headers(self._backend.config.gateway, call.request.affinity)}
                async with _exchange(self._backend.client, replica, call, headers) as events:
                    async for event in events:
                        if event.data == "[DONE]":
                            parser.saw_done = True
                            break
                        for delta in parse(event.data):
                            yield delta
                if not parser.is_done:
                    raise BackendConnectionError(f"{call.url}: the stream ended before the completion did")
        except BackendError:
            replica.num_errors += 1  # shown per replica on paragen serve's /metrics
            raise

    async def _call(self, replica: Replica, usage: Usage) -> _Call:
        """What an attempt sends: the request, or after a cut its continuation (resumed), raw where
        vLLM's template would rewrite it; a fresh attempt's ``usage`` starts over, a resumed one's
        adds to the counts before it."""
        backend, transcript = self._backend, self._transcript
        info = await backend.server_info(replica)
        request = transcript.request(self.usage)
        rendered = renders_raw(request, info, backend.config)
        if rendered:
            request = await raw_continuation(backend.client, replica, info, request, backend.config)
        url, body, rid = self._prepare(replica, info, request, usage)
        base = transcript.base(self.usage)
        parser = ChunkParser(backend.endpoint_for(request), usage, num_choices=request.n, base=base)
        parse = parser.parse
        if rendered:
            body["add_special_tokens"] = False  # the rendered template already holds its BOS
            if base is not None:
                usage.reasoning_tokens = base.reasoning_tokens  # a raw completion's usage reports none
            # A thought the server sent apart, cut mid-way and continued raw, comes back as text.
            splitter = transcript.resplitter()
            if splitter is not None:
                before = 0 if base is None else base.reasoning_tokens or 0
                parse = Resplit(parse, splitter, usage, before).parse
        return _Call(url, body, rid, info.model, request, parser, parse)

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
            thinking_budget=config.thinking.token_budget,
        )
        body = {**build_body(request, options), **config.server_knobs(), **config.extra_body}
        if not self._transcript.num_seen:
            usage.prompt_tokens, usage.completion_tokens, usage.source = 0, 0, "none"
            usage.cached_prompt_tokens = None
        url = f"{replica.url}/{'chat/completions' if endpoint == 'chat' else 'completions'}"
        return url, body, rid


# --- tracing and the HTTP exchange ----------------------------------------------------------------


@contextmanager
def _traced(call: _Call, usage: Usage) -> Iterator[dict[str, str]]:
    """The attempt as a GenAI client span where tracing is on: the request's headers, with its W3C
    traceparent; the span ends with the attempt's counts and its BackendError, if any."""
    tracer = tracing.tracer()
    if tracer is None:
        yield _SSE_HEADERS
        return
    operation = "chat" if call.url.endswith("/chat/completions") else "text_completion"
    span = tracer.request(operation, call.model, call.url, call.request)
    failure: BackendError | None = None
    try:
        yield span.headers(_SSE_HEADERS)
    except BackendError as exc:
        failure = exc
        raise
    finally:
        span.ended(usage, failure)


@asynccontextmanager
async def _exchange(
    client: httpx.AsyncClient, replica: Replica, call: _Call, headers: dict[str, str]
) -> AsyncIterator[AsyncIterator[ServerSentEvent]]:
    """The POST's server-sent events, its failures as BackendErrors without the request's
    credentials; on exit the response is closed, which aborts a request not done."""
    with map_http_errors(call.url):
        http_request = client.build_request("POST", call.url, json=call.body, headers=headers)
        response = await client.send(http_request, stream=True)
    try:
        with map_http_errors(call.url), redacting(response.request):
            await raise_for_status(response)
            async with aclosing(EventSource(response).aiter_sse()) as events:
                yield events
    finally:
        await _close(response, client, replica, None if call.parser.is_done else call.rid)


async def _close(
    response: httpx.Response, client: httpx.AsyncClient, replica: Replica, rid: str | None
) -> None:
    """Close the response even while being cancelled: closing it is what aborts the request."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(5):
        await response.aclose()
        if rid is not None:  # SGLang: also say so explicitly, by request id
            # Best effort: the closed connection has already told the server.
            with contextlib.suppress(httpx.HTTPError):
                await client.post(f"{replica.root}/abort_request", json={"rid": rid}, timeout=2.0)
