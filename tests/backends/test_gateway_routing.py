"""A routing key per problem for a gateway (``gateway=`` on the OpenAI backend): every request of
a problem, its samples and a probe of a running sample alike, carries the problem's key in the
header the named gateway pins by, and each trace records it; without a gateway nothing is sent.
The witness is what reached the (fake) server, not paragen's own accounting."""

from __future__ import annotations

from typing import Any

import pytest
from openai_fakes import FakeServer

from paragen import LiveSample, Orchestrator, Problem, RunContext, StrategyResult
from paragen.backends.openai import OpenAIBackend
from paragen.backends.routing import HEADERS, routing_key
from paragen.errors import ConfigError
from paragen.strategy import BaseStrategy, StrategyConfig
from strategies.majority import Majority

pytestmark = pytest.mark.anyio
PROBLEMS = [Problem(id="a", question="1 + 1?"), Problem(id="b", question="2 + 2?")]


def make(server: FakeServer, **options: Any) -> OpenAIBackend:
    return OpenAIBackend.from_spec("http://fake/v1", transport=server.transport, api_key_env=None, **options)


def generation_headers(server: FakeServer, name: str) -> list[str | None]:
    """The header ``name`` of every generation request the server got, in order."""
    return [r.headers.get(name) for r in server.requests if r.url.path.endswith("completions")]


class ProbeOnce(BaseStrategy[StrategyConfig]):
    """One sample, probed at its first token (a continuation request of its own)."""

    name = "probe_once"

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        probed: list[bool] = []

        async def monitor(live: LiveSample) -> str | None:
            if not probed:
                probed.append(True)
                await ctx.probe(live, " So the answer is", max_tokens=2)
            return None

        request = ctx.request(messages=[{"role": "user", "content": problem.question}])
        async with ctx.fanout(request, monitor=monitor) as fan:
            async for _ in fan:
                pass
        return ctx.finish(None)


@pytest.mark.parametrize("gateway", sorted(HEADERS))
async def test_each_problem_s_requests_carry_its_key_and_its_traces_record_it(
    server: FakeServer, gateway: Any
) -> None:
    backend = make(server, gateway=gateway)
    results = await Orchestrator(backend).run_many(Majority(n=3), PROBLEMS)
    await backend.aclose()
    sent = generation_headers(server, HEADERS[gateway])
    assert len(sent) == 6 and None not in sent
    keys = {routing_key(f"{p.id}\n{p.question}") for p in PROBLEMS}
    assert set(sent) == keys  # one key per problem, the same on all three of its samples
    for result in results:
        (key,) = {t.meta["routing_key"] for t in result.traces}
        assert sent.count(key) == 3
        assert key.startswith("pg-") and len(key) == 19  # a digest, not the problem's text


async def test_a_probe_of_a_running_sample_carries_the_sample_s_key(server: FakeServer) -> None:
    backend = make(server, gateway="sglang")
    result = await Orchestrator(backend).run(ProbeOnce(), PROBLEMS[0])
    await backend.aclose()
    sample, probe = sorted(result.traces, key=lambda t: t.kind != "sample")
    assert (sample.kind, probe.kind) == ("sample", "probe")
    sent = generation_headers(server, "x-smg-routing-key")
    assert len(sent) == 2 and set(sent) == {sample.meta["routing_key"]} == {probe.meta["routing_key"]}


async def test_without_a_gateway_no_key_is_sent_nor_recorded(server: FakeServer) -> None:
    backend = make(server)
    result = await Orchestrator(backend).run(Majority(n=2), PROBLEMS[0])
    await backend.aclose()
    assert backend.capabilities.routing_header is None
    for name in HEADERS.values():
        assert generation_headers(server, name) == [None, None]
    assert all("routing_key" not in t.meta for t in result.traces)


def test_an_unknown_gateway_is_one_config_error() -> None:
    with pytest.raises(ConfigError, match="gateway"):
        OpenAIBackend.from_spec("http://fake/v1", gateway="nginx")
