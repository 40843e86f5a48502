"""Opening the OpenAI backend: capabilities known before the first problem, one clear error for a
wrong base URL, and the pool's health checks (a replica down is skipped, then taken back)."""

from __future__ import annotations

import anyio
import httpx
import pytest
from openai_fakes import FakeServer, chat_chunk, chunk

from paragen.backends.base import generate
from paragen.backends.openai import OpenAIBackend
from paragen.errors import ConfigError
from paragen.orchestrator import Orchestrator
from paragen.strategy import build_strategy
from paragen.types import GenerateRequest, Problem

pytestmark = pytest.mark.anyio


def backend_for(server: FakeServer, url: str = "http://fake/v1", **options: object) -> OpenAIBackend:
    return OpenAIBackend.from_spec(url, transport=server.transport, api_key_env=None, **options)


async def test_the_first_problem_sees_the_probed_capabilities(server: FakeServer) -> None:
    server.default = lambda r: server.sse([chat_chunk("\\boxed{4}", finish="stop"), "[DONE]"])
    backend = backend_for(server)
    assert not backend.capabilities.continue_final  # config defaults: nothing known yet
    strategy = build_strategy("budget_forcing", {"think_tokens": 8})
    result = await Orchestrator(backend).run(strategy, Problem(question="2+2?"))
    assert result.stop_reason == "done" and result.answer == "4", result.error
    assert backend.capabilities.continue_final  # a vLLM server continues a prefilled reply
    assert server.requests[0].url.path == "/v1/models"  # probed before the strategy ran


async def test_a_base_url_without_v1_is_one_config_error_at_open() -> None:
    def vllm_routes(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m", "owned_by": "vllm"}]})
        return httpx.Response(404, json={"detail": "Not Found"})

    backend = OpenAIBackend.from_spec(
        "http://fake:8000", transport=httpx.MockTransport(vllm_routes), api_key_env=None, model="m"
    )
    strategy = build_strategy("ffs", {"n": 4})
    with pytest.raises(ConfigError) as info:
        await Orchestrator(backend).run_many(strategy, [Problem(question="2+2?")] * 3)
    line = info.value.one_line()
    assert "http://fake:8000 is not an OpenAI API base URL" in line and "use http://fake:8000/v1" in line


async def test_open_marks_an_unreachable_replica_down_and_goes_on() -> None:
    server = FakeServer()

    def route(request: httpx.Request) -> httpx.Response:
        if request.url.host == "dead":
            raise httpx.ConnectError("connection refused")
        return server.handler(request)

    backend = OpenAIBackend.from_spec(
        "http://dead/v1", base_urls=["http://live/v1"], transport=httpx.MockTransport(route), api_key_env=None
    )
    caps = await backend.open()
    dead, live = backend.pool.replicas
    assert caps.continue_final and not dead.is_up and live.is_up
    for _ in range(3):
        await generate(backend, GenerateRequest(prompt="x"))
    assert (dead.num_requests, live.num_requests) == (0, 3)


async def test_a_replica_that_fails_is_skipped_then_taken_back_when_it_answers() -> None:
    server, alive = FakeServer(), {"r0": True}
    server.default = lambda r: server.sse([chunk("ok", finish="stop"), "[DONE]"])

    def route(request: httpx.Request) -> httpx.Response:
        if not alive.get(request.url.host, True):
            raise httpx.ConnectError("connection refused")
        return server.handler(request)

    backend = OpenAIBackend.from_spec(
        "http://r0/v1",
        base_urls=["http://r1/v1"],
        transport=httpx.MockTransport(route),
        api_key_env=None,
        backoff=0.0,
    )
    backend.pool.health_interval = 0.05
    await backend.open()
    r0 = backend.pool.replicas[0]
    alive["r0"] = False
    for _ in range(4):  # the first that lands on r0 fails over to r1; r0 is then left out
        [completion] = await generate(backend, GenerateRequest(prompt="x"))
        assert completion.text == "ok"
    assert not r0.is_up and r0.num_failures == 1
    alive["r0"] = True
    await anyio.sleep(0.06)
    for _ in range(4):
        await generate(backend, GenerateRequest(prompt="x"))
    assert r0.is_up and r0.num_requests >= 2  # checked, taken back and given its share again
