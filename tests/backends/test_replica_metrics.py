"""Per-replica series of paragen.metrics, read from an OpenAI backend's pool: requests, errors (a 503
retried on the other replica), up (a replica marked down)."""

from __future__ import annotations

import httpx
import pytest
from openai_fakes import FakeServer

from paragen.backends.base import generate
from paragen.backends.openai import OpenAIBackend
from paragen.metrics import Metrics
from paragen.types import GenerateRequest

pytestmark = pytest.mark.anyio


def series(metrics: Metrics, name: str) -> dict[str, float]:
    prefix = f'{name}{{replica="'
    return {k[len(prefix) : -2]: v for k, v in metrics.values().items() if k.startswith(prefix)}


async def test_errors_requests_and_up_per_replica(server: FakeServer) -> None:
    def reply(request: httpx.Request) -> httpx.Response:
        if request.url.host == "r0":
            return httpx.Response(503, json={"error": {"message": "busy"}})
        return server.default(request)

    server.replies.extend([reply] * 2)
    backend = OpenAIBackend.from_spec(
        "http://r0/v1", base_urls=["http://r1/v1"], transport=server.transport, api_key_env=None, backoff=0.0
    )
    metrics = Metrics()
    metrics.watch(backend)
    for _ in range(2):
        await generate(backend, GenerateRequest(prompt="x", affinity="p"))
    hosts = [r.url.host for r in server.generation_requests()]
    assert hosts.count("r0") == series(metrics, "paragen_replica_errors_total")["http://r0/v1"] >= 1
    assert series(metrics, "paragen_replica_errors_total")["http://r1/v1"] == 0
    requests = series(metrics, "paragen_replica_requests_total")
    assert requests == {"http://r0/v1": hosts.count("r0"), "http://r1/v1": hosts.count("r1")}
    assert series(metrics, "paragen_replica_up") == {
        "http://r0/v1": 1,
        "http://r1/v1": 1,
    }  # a 503 is no outage
    backend.pool.mark_down(backend.pool.replicas[0])
    assert series(metrics, "paragen_replica_up") == {"http://r0/v1": 0, "http://r1/v1": 1}
