"""A strategy that raises (a bug) answers its own request with a 500 and the server goes on."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from conftest import Serve

from paragen import BaseStrategy, RunContext, StrategyConfig, registry
from paragen.backends.scripted import ScriptedBackend
from paragen.types import Problem, StrategyResult

Q = [{"role": "user", "content": "What is 7 + 5?"}]


class BrokenConfig(StrategyConfig):
    n: int = 2


class Broken(BaseStrategy[BrokenConfig]):
    """Samples once, then fails the way a bug does."""

    name = "broken_for_tests"
    Config = BrokenConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        await ctx.sample(ctx.request(prompt=problem.question))
        raise RuntimeError("boom: a bug in the strategy")


@pytest.fixture(autouse=True)
def broken_registered() -> None:
    if "broken_for_tests" not in registry.names(registry.STRATEGY_GROUP):
        registry.register(registry.STRATEGY_GROUP, "broken_for_tests", Broken)


@pytest.mark.parametrize("choices", [1, 3])
def test_a_raising_strategy_is_one_500_and_the_server_goes_on(
    serve: Serve, scripted: ScriptedBackend, caplog: pytest.LogCaptureFixture, choices: int
) -> None:
    with serve(scripted) as url, caplog.at_level(logging.ERROR, logger="paragen.serve"):
        body = {"model": "broken_for_tests/scripted", "messages": Q, "n": choices}
        response = httpx.post(url + "/chat/completions", json=body)
        error = response.json()["error"]
        assert response.status_code == 500 and error["type"] == "server_error"
        assert "RuntimeError" in error["message"] and "Traceback" not in response.text
        assert "\n" not in error["message"]
        assert any("boom" in (r.exc_text or "") or r.exc_info for r in caplog.records)
        ok = httpx.post(url + "/chat/completions", json={"model": "majority-3/scripted", "messages": Q})
        assert ok.status_code == 200 and ok.json()["choices"][0]["paragen"]["answer"] == "12"
        health = httpx.get(url.removesuffix("/v1") + "/health").json()
        assert health["runs_running"] == 0 and health["samples_running"] == 0


def test_a_raising_strategy_streamed_ends_its_stream_with_the_error(
    serve: Serve, scripted: ScriptedBackend
) -> None:
    with serve(scripted) as url:
        body = {"model": "broken_for_tests/scripted", "messages": Q, "stream": True}
        with httpx.stream("POST", url + "/chat/completions", json=body) as response:
            data = [
                line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")
            ]
        error = json.loads(data[-1])["error"]
        assert error["type"] == "server_error" and "RuntimeError" in error["message"]
        ok = httpx.post(url + "/chat/completions", json={"model": "majority-2/scripted", "messages": Q})
        assert ok.status_code == 200
