"""A loopback TCP proxy that stalls some responses, and the hedging workload run through it.

``StallProxy`` sits in front of one server: every ``every``-th POST's response is held back
``stall_s`` seconds before its first byte reaches the client (the server meanwhile generates
and the proxy keeps reading, so it sees what the server produced). A client that hangs up
closes the proxy's connection to the server, so the server aborts as it would without a
proxy. The proxy counts SSE chunks per request: sent by the server, and forwarded to the client.

Shared by tests/backends/test_hedge_llama.py and benchmarks/hedge.py.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio
from anyio.abc import SocketStream, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from paragen.backends.openai import OpenAIBackend
from paragen.types import GenerateRequest, SamplingParams, Usage


@dataclass
class _Request:
    """One request on a proxied connection, as the proxy saw it."""

    stalled: bool
    server_chunks: int = 0
    forwarded_chunks: int = 0
    done: bool = False  # the server's [DONE] went through to the client
    aborted: bool = False  # the client hung up before it


@dataclass
class StallProxy:
    upstream_port: int
    every: int = 0  # stall every every-th POST (0: never)
    stall_s: float = 2.0
    port: int = 0
    requests: list[_Request] = field(default_factory=list)
    open_connections: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=self.port)
        async with listener:
            self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
            task_status.started()
            await listener.serve(self._connection)

    async def _connection(self, client: SocketStream) -> None:
        self.open_connections += 1
        try:
            async with client, await anyio.connect_tcp("127.0.0.1", self.upstream_port) as upstream:
                send, receive = anyio.create_memory_object_stream[tuple[float, bytes, _Request]](1000)
                current: list[_Request] = []
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._upward, client, upstream, current, tg.cancel_scope)
                    tg.start_soon(self._read_server, upstream, current, send)
                    tg.start_soon(self._forward, client, receive, tg.cancel_scope)
        except (OSError, anyio.BrokenResourceError):
            pass
        finally:
            self.open_connections -= 1

    async def _upward(
        self, client: SocketStream, upstream: SocketStream, current: list[_Request], scope: anyio.CancelScope
    ) -> None:
        """Client to server; a new POST starts a request; the client hanging up ends the connection."""
        try:
            async for data in client:
                # A completion starts a request; paragen's tokenize calls (prompt counts for a server that
                # streams no usage) pass through uncounted and never stall.
                if data.startswith(b"POST ") and b"completions " in data.split(b"\r\n", 1)[0]:
                    posts = len(self.requests) + 1
                    request = _Request(stalled=self.every > 0 and posts % self.every == 0)
                    self.requests.append(request)
                    current.append(request)
                await upstream.send(data)
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            pass
        if current and not current[-1].done:
            current[-1].aborted = True
        scope.cancel()  # closing the server side is what makes the server abort

    async def _read_server(
        self,
        upstream: SocketStream,
        current: list[_Request],
        send: MemoryObjectSendStream[tuple[float, bytes, _Request]],
    ) -> None:
        """Server to a queue, at once (so the server never waits on a stall); chunks counted here."""
        release: dict[int, float] = {}
        async with send:
            async for data in upstream:
                request = current[-1] if current else _Request(stalled=False)
                request.server_chunks += data.count(b"data: {")
                key = id(request)
                if key not in release:
                    release[key] = time.monotonic() + (self.stall_s if request.stalled else 0.0)
                await send.send((release[key], data, request))

    async def _forward(
        self,
        client: SocketStream,
        receive: MemoryObjectReceiveStream[tuple[float, bytes, _Request]],
        scope: anyio.CancelScope,
    ) -> None:
        async with receive:
            async for release_at, data, request in receive:
                await anyio.sleep(max(0.0, release_at - time.monotonic()))
                await client.send(data)
                request.forwarded_chunks += data.count(b"data: {")
                request.done = request.done or b"[DONE]" in data
        scope.cancel()

    def tally(self) -> dict[str, int]:
        aborted = [r for r in self.requests if r.aborted]
        return {
            "posts": len(self.requests),
            "stalled": sum(r.stalled for r in self.requests),
            "aborted": len(aborted),
            "aborted_server_chunks": sum(r.server_chunks for r in aborted),
            "aborted_forwarded_chunks": sum(r.forwarded_chunks for r in aborted),
        }


@dataclass
class Outcome:
    """One request of the workload: its latency, text and usage."""

    seconds: float
    text: str
    usage: Usage


async def one(backend: OpenAIBackend, i: int, max_tokens: int, hedge_after_s: float | None) -> Outcome:
    params = SamplingParams(max_tokens=max_tokens, temperature=0.7, seed=1000 + i)
    request = GenerateRequest(prompt=f"Q: name a number bigger than {i}.\nA:", params=params)
    request = request.model_copy(update={"hedge_after_s": hedge_after_s})
    start = time.monotonic()
    async with backend.stream(request) as stream:
        text = "".join([d.text async for d in stream])
    return Outcome(time.monotonic() - start, text, stream.usage)


async def workload(
    backend: OpenAIBackend, *, requests: int, workers: int, max_tokens: int, hedge_after_s: float | None
) -> list[Outcome]:
    """``requests`` requests, ``workers`` at a time; outcomes in request order."""
    outcomes: list[Outcome | None] = [None] * requests
    queue = iter(range(requests))

    async def worker() -> None:
        for i in queue:
            outcomes[i] = await one(backend, i, max_tokens, hedge_after_s)

    async with anyio.create_task_group() as tg:
        for _ in range(workers):
            tg.start_soon(worker)
    return [o for o in outcomes if o is not None]


@dataclass
class Measured:
    """One run of the workload through two proxies (the second one stalling)."""

    outcomes: list[Outcome]
    proxies: tuple[StallProxy, StallProxy]

    def tally(self) -> dict[str, int]:
        first, second = (p.tally() for p in self.proxies)
        return {key: first[key] + second[key] for key in first}


async def measure(
    ports: tuple[int, int],
    *,
    every: int,
    stall_s: float,
    hedge_after_s: float | None,
    requests: int,
    workers: int,
    max_tokens: int,
) -> Measured:
    """The workload over a pool of two servers, each behind a proxy; the second's stalls every
    ``every``-th response; afterwards the pool is idle and every proxied connection closed."""
    proxies = (StallProxy(ports[0]), StallProxy(ports[1], every=every, stall_s=stall_s))
    async with anyio.create_task_group() as tg:
        for proxy in proxies:
            await tg.start(proxy.serve)
        urls = [p.url for p in proxies]
        backend = OpenAIBackend.from_spec(urls[0], base_urls=urls[1:], api_key_env=None, max_retries=0)
        try:
            await backend.open()
            outcomes = await workload(
                backend,
                requests=requests,
                workers=workers,
                max_tokens=max_tokens,
                hedge_after_s=hedge_after_s,
            )
            assert all(r.num_outstanding == 0 for r in backend.pool.replicas)
        finally:
            await backend.aclose()
        for _ in range(200):  # the proxies see the hangups a moment later
            if not any(p.open_connections for p in proxies):
                break
            await anyio.sleep(0.05)
        assert not any(p.open_connections for p in proxies), "a proxied connection was left open"
        tg.cancel_scope.cancel()
    return Measured(outcomes, proxies)


async def warm_up(ports: tuple[int, int], max_tokens: int) -> None:
    """A request to each server first, so neither run pays a server's first-request costs."""
    for port in ports:
        backend = OpenAIBackend.from_spec(f"http://127.0.0.1:{port}/v1", api_key_env=None)
        await workload(backend, requests=1, workers=1, max_tokens=max_tokens, hedge_after_s=None)
        await backend.aclose()


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile, nearest rank (p95 of 64: the 61st smallest)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def summary(outcomes: Sequence[Outcome]) -> dict[str, float]:
    seconds = [o.seconds for o in outcomes]
    return {
        "p50_s": round(statistics.median(seconds), 3),
        "p95_s": round(percentile(seconds, 95), 3),
        "max_s": round(max(seconds), 3),
        "hedges": sum(o.usage.hedges for o in outcomes),
        "hedged_tokens": sum(o.usage.hedged_tokens for o in outcomes),
        "tokens": sum(o.usage.completion_tokens for o in outcomes),
    }


def table(rows: dict[str, dict[str, float]]) -> str:
    columns = ["p50_s", "p95_s", "max_s", "hedges", "hedged_tokens", "tokens"]
    lines = ["| run | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for name, row in rows.items():
        lines.append(f"| {name} | " + " | ".join(str(row[c]) for c in columns) + " |")
    return "\n".join(lines)
