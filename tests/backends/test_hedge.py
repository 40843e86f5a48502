"""Hedged requests over the pool against fake replicas (httpx.MockTransport): who wins, what is closed,
what is counted. Timings here are the fakes' own (a stall of seconds against a hedge of tens of ms)."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

import anyio
import httpx
import pytest
from openai_fakes import FakeServer, FakeSSE, chunk, usage_chunk

from paragen import Orchestrator, Problem, build_strategy
from paragen._accounting import summarize
from paragen._live import LiveSample
from paragen.backends.base import generate
from paragen.backends.openai import OpenAIBackend
from paragen.backends.wrappers import request_key
from paragen.errors import BackendConnectionError
from paragen.types import Delta, GenerateRequest, SamplingParams, Trace, Usage

pytestmark = pytest.mark.anyio

REQUEST = GenerateRequest(prompt="2+2=", params=SamplingParams(max_tokens=4, seed=7), affinity="p")


def make(server: FakeServer, replicas: int = 2, **options: Any) -> OpenAIBackend:
    options.setdefault("backoff", 0.0)
    options.setdefault("api_key_env", None)
    urls = [f"http://r{i}/v1" for i in range(1, replicas)]
    return OpenAIBackend.from_spec("http://r0/v1", base_urls=urls, transport=server.transport, **options)


def answer(text: str = "4") -> list[Any]:
    return [chunk(text), chunk(".", finish="stop"), usage_chunk(3, 2), "[DONE]"]


def by_host(server: FakeServer, **replies: Any) -> None:
    """Reply per replica host: a callable of the request, or (events, delay between events)."""

    def reply(request: httpx.Request) -> httpx.Response:
        spec = replies[request.url.host]
        return spec(request) if callable(spec) else server.sse(*spec)

    server.default = reply


def hosts(server: FakeServer) -> list[str | None]:
    return [r.url.host for r in server.generation_requests()]


def idle(backend: OpenAIBackend) -> bool:
    return all(r.num_outstanding == 0 for r in backend.pool.replicas)


async def run(backend: OpenAIBackend, request: GenerateRequest = REQUEST) -> tuple[str, Usage, float]:
    start = time.monotonic()
    with anyio.fail_after(10):
        async with backend.stream(request) as stream:
            text = "".join([d.text async for d in stream])
    return text, stream.usage, time.monotonic() - start


async def test_a_slow_primary_loses_to_the_hedge(server: FakeServer) -> None:
    by_host(server, r0=(answer("slow"), 5.0), r1=(answer("4"), 0.001))
    backend = make(server, hedge_after_s=0.05)
    text, usage, seconds = await run(backend)
    assert text == "4." and seconds < 4.0  # the hedge's, long before the primary's first token
    assert hosts(server) == ["r0", "r1"]
    assert server.bodies[0] == server.bodies[1]  # the same request, seed included
    primary, hedge = server.streams
    assert hedge.closed and hedge.sent == 4  # read to the end, then closed
    assert primary.closed and primary.sent == 0  # closed, so the server aborts it
    assert (usage.hedges, usage.hedged_tokens, usage.completion_tokens, usage.prompt_tokens) == (1, 0, 2, 3)
    assert idle(backend) and all(r.is_up for r in backend.pool.replicas)


async def test_a_fast_primary_sends_no_hedge(server: FakeServer) -> None:
    by_host(server, r0=(answer(), 0.001), r1=(answer(), 0.001))
    backend = make(server, hedge_after_s=0.5)
    text, usage, _ = await run(backend)
    assert text == "4." and hosts(server) == ["r0"]
    assert (usage.hedges, usage.hedged_tokens) == (0, 0) and idle(backend)


async def test_both_failing_is_an_error(server: FakeServer) -> None:
    cut = httpx.RemoteProtocolError("peer closed")
    refused = httpx.Response(503, json={"error": {"message": "draining"}})
    by_host(server, r0=([cut], 0.2), r1=lambda r: refused)
    backend = make(server, hedge_after_s=0.05, max_retries=0)
    with anyio.fail_after(10), pytest.raises(BackendConnectionError):
        await generate(backend, REQUEST)  # the primary's error; the hedge's 503 failed first
    assert hosts(server) == ["r0", "r1"] and idle(backend)
    r0, r1 = backend.pool.replicas
    assert not r0.is_up and r1.is_up  # a cut connection marks down; a 503 does not


async def test_the_hedge_finishes_when_the_primary_fails_after_it_was_sent(server: FakeServer) -> None:
    by_host(server, r0=([httpx.ReadError("reset")], 0.3), r1=(answer("4"), 0.5))
    backend = make(server, hedge_after_s=0.05, max_retries=0)
    text, usage, _ = await run(backend)
    assert text == "4." and usage.hedges == 1
    r0, r1 = backend.pool.replicas
    assert not r0.is_up and r1.is_up and idle(backend)


async def test_a_primary_failing_before_the_hedge_is_retried_as_without_hedging(server: FakeServer) -> None:
    server.replies.append(lambda r: httpx.Response(503, json={"error": {"message": "busy"}}))
    backend = make(server, hedge_after_s=1.0)
    text, usage, _ = await run(backend)
    assert text == "hi" and usage.hedges == 0 and hosts(server) == ["r0", "r1"]


async def test_cancelling_from_outside_closes_both(server: FakeServer) -> None:
    by_host(server, r0=(answer(), 30.0), r1=(answer(), 30.0))
    backend = make(server, hedge_after_s=0.05)
    with anyio.move_on_after(0.5) as scope:
        async with backend.stream(REQUEST) as stream:
            async for _ in stream:
                pass
    assert scope.cancelled_caught and hosts(server) == ["r0", "r1"]
    assert all(s.closed for s in server.streams) and idle(backend)
    assert stream.usage.hedges == 1


async def test_leaving_the_winners_stream_closes_it(server: FakeServer) -> None:
    by_host(server, r0=(answer(), 30.0), r1=([chunk(str(i)) for i in range(1000)], 0.001))
    backend = make(server, hedge_after_s=0.0)
    async with backend.stream(REQUEST) as stream:
        async for _ in stream:
            break
    assert all(s.closed for s in server.streams) and idle(backend)


class GatedSSE(FakeSSE):
    """An SSE body that holds its first event until ``gate`` is set."""

    def __init__(self, events: list[Any], gate: anyio.Event) -> None:
        super().__init__(events)
        self.gate = gate

    async def body(self) -> AsyncGenerator[bytes, None]:
        await self.gate.wait()
        async with aclosing(super().body()) as body:
            async for data in body:
                yield data


async def test_what_the_loser_streamed_is_counted(server: FakeServer) -> None:
    # Both copies get their first token in the same instant: one wins, the other's token is hedged.
    gate = anyio.Event()

    def reply(request: httpx.Request) -> httpx.Response:
        stream = GatedSSE([chunk("4"), chunk(".", finish="stop"), "[DONE]"], gate)
        server.streams.append(stream)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)

    server.default = reply
    backend = make(server, hedge_after_s=0.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: _open_gate(gate))
        text, usage, _ = await run(backend)
    assert text == "4." and (usage.hedges, usage.hedged_tokens, usage.completion_tokens) == (1, 1, 2)
    assert all(s.closed for s in server.streams) and idle(backend)


async def _open_gate(gate: anyio.Event) -> None:
    await anyio.sleep(0.2)
    gate.set()


async def test_the_request_overrides_the_backend(server: FakeServer) -> None:
    by_host(server, r0=(answer(), 0.3), r1=(answer(), 0.001))
    await run(make(server), REQUEST.model_copy(update={"hedge_after_s": 0.0}))
    assert hosts(server) == ["r0", "r1"]
    server.requests.clear()
    await run(make(server, hedge_after_s=0.0), REQUEST.model_copy(update={"hedge_after_s": float("inf")}))
    assert hosts(server) == ["r0"]


async def test_one_replica_or_none_up_sends_no_hedge(server: FakeServer) -> None:
    by_host(server, r0=(answer(), 0.2), r1=(answer(), 0.001))
    _, usage, _ = await run(make(server, replicas=1, hedge_after_s=0.0))
    assert usage.hedges == 0 and hosts(server) == ["r0"]
    backend = make(server, hedge_after_s=0.0)
    backend.pool.mark_down(backend.pool.replicas[1])
    server.requests.clear()
    _, usage, _ = await run(backend)
    assert usage.hedges == 0 and hosts(server) == ["r0"]


async def test_hedges_of_one_problem_share_a_replica_and_leave_its_key(server: FakeServer) -> None:
    by_host(server, r0=(answer(), 0.3), r1=(answer(), 0.01), r2=(answer(), 0.01))
    backend = make(server, replicas=3, hedge_after_s=0.0)
    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(run, backend)
    seen = hosts(server)
    assert seen.count("r0") == 3 and len(set(seen)) == 2  # the three hedges on one other replica
    assert backend.pool._affinity["p"].url == "http://r0/v1"  # the problem's key stayed home


def test_hedging_is_a_routing_hint_not_content() -> None:
    assert request_key(REQUEST) == request_key(REQUEST.model_copy(update={"hedge_after_s": 0.2}))


def test_the_traces_and_the_run_count_the_losers_tokens() -> None:
    live = LiveSample(Trace(id=0))
    live.add(Delta(0, "four", 5, finish_reason="stop"), 0.5)
    usage = Usage(completion_tokens=5, source="server", hedges=1, hedged_tokens=3)
    assert live.apply_usage(usage) == 3  # the hedged tokens are charged to the budget, once
    assert live.apply_usage(usage) == 0
    trace = live.finish(1.0)
    assert (trace.hedges, trace.hedged_tokens, trace.completion_tokens) == (1, 3, 5)
    run_usage = summarize([trace], latency_s=1.0)
    assert (run_usage.num_hedges, run_usage.hedged_tokens) == (1, 3)
    assert (run_usage.total_tokens, run_usage.wasted_tokens, run_usage.sequential_tokens) == (8, 3, 5)


async def test_a_run_reports_its_hedges(server: FakeServer) -> None:
    by_host(server, r0=(answer("slow"), 5.0), r1=(answer("4"), 0.001))
    backend = make(server, hedge_after_s=0.05)
    orchestrator = Orchestrator(backend, defaults=SamplingParams(max_tokens=4, seed=0))
    with anyio.fail_after(10):
        result = await orchestrator.run(build_strategy("majority", {"n": 2}), Problem(question="2+2?"))
    assert [t.status for t in result.traces] == ["ok", "ok"] and [t.hedges for t in result.traces] == [1, 1]
    assert (result.usage.num_hedges, result.usage.hedged_tokens, result.usage.total_tokens) == (2, 0, 4)
    assert sorted(str(h) for h in hosts(server)) == ["r0", "r0", "r1", "r1"]  # two primaries, two hedges
