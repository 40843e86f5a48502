"""Replica routing: least outstanding requests, prefix affinity, and failover on retry."""

from __future__ import annotations

from contextlib import AsyncExitStack

import httpx
import pytest
from openai_fakes import FakeServer, chunk

from paragen.backends.base import generate
from paragen.backends.openai import OpenAIBackend
from paragen.backends.pool import Pool
from paragen.types import GenerateRequest


def test_least_outstanding_then_round_robin() -> None:
    pool = Pool(["a", "b", "c"])
    first = [pool.pick().url for _ in range(3)]
    assert first == ["a", "b", "c"]  # an idle pool is filled round-robin
    a, b, _ = pool.replicas
    with pool.lease(a), pool.lease(a), pool.lease(b):
        assert pool.pick().url == "c"
    assert a.num_outstanding == 0 and a.num_requests == 2


def test_affinity_sticks_while_the_replica_has_room() -> None:
    pool = Pool(["a", "b"], affinity_slack=2)
    home = pool.pick("problem-1")
    with pool.lease(home):
        assert pool.pick("problem-1") is home  # busier, but within the slack
        assert pool.pick("problem-2") is not home  # a new problem goes where it is quiet
        with pool.lease(home), pool.lease(home):
            assert pool.pick("problem-1") is not home  # 3 more than the other: too far
            assert pool.pick("problem-1") is not home  # and the key moved with it


def test_affinity_respects_max_outstanding() -> None:
    pool = Pool(["a", "b"], max_outstanding=1)
    home = pool.pick("p")
    with pool.lease(home):
        assert pool.pick("p") is not home


def test_affinity_keys_are_bounded() -> None:
    pool = Pool(["a", "b"], max_affinity_keys=2)
    for key in ("p1", "p2", "p3"):
        pool.pick(key)
    assert list(pool._affinity) == ["p2", "p3"]


def test_avoid_skips_a_failed_replica_when_there_is_another() -> None:
    pool = Pool(["a", "b"])
    a, b = pool.replicas
    assert pool.pick(avoid=a) is b
    assert Pool(["a"]).pick(avoid=None).url == "a"
    solo = Pool(["a"])
    assert solo.pick(avoid=solo.replicas[0]).url == "a"


@pytest.mark.anyio
async def test_backend_routes_over_replicas_with_affinity(server: FakeServer) -> None:
    server.default = lambda r: server.sse([chunk("x"), chunk("y", finish="stop"), "[DONE]"], delay=0.001)
    backend = OpenAIBackend.from_spec(
        "http://r0/v1", base_urls=["http://r1/v1"], transport=server.transport, api_key_env=None
    )
    hosts = []
    async with AsyncExitStack() as stack:
        # Hold 4 streams of one problem open, then 1 of another.
        for key in ["p", "p", "p", "p", "q"]:
            stream = await stack.enter_async_context(
                backend.stream(GenerateRequest(prompt="x", affinity=key))
            )
            await anext(aiter(stream))
            hosts.append(server.generation_requests()[-1].url.host)
        assert [r.num_outstanding for r in backend.pool.replicas] == [4, 1]
    assert hosts == ["r0", "r0", "r0", "r0", "r1"]
    assert [r.num_outstanding for r in backend.pool.replicas] == [0, 0]


@pytest.mark.anyio
async def test_retry_moves_to_another_replica(server: FakeServer) -> None:
    def reply(request: httpx.Request) -> httpx.Response:
        if request.url.host == "r0":
            return httpx.Response(503, json={"error": {"message": "draining"}})
        return server.sse([chunk("ok", finish="stop"), "[DONE]"])

    server.default = reply
    backend = OpenAIBackend.from_spec(
        "http://r0/v1", base_urls=["http://r1/v1"], transport=server.transport, backoff=0.0, api_key_env=None
    )
    [completion] = await generate(backend, GenerateRequest(prompt="x"))
    assert completion.text == "ok"
    assert [r.url.host for r in server.generation_requests()] == ["r0", "r1"]
