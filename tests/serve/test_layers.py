"""paragen behind paragen: paragen's own OpenAI backend pointed at ``paragen serve``.

The accounting holds through both layers: what the outer run counts is what the inner
server generated (its /health totals), counted by the server, not estimated.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from conftest import Serve, counting_responder

from paragen import Orchestrator, Problem, SamplingParams, StrategyResult, build_strategy
from paragen.backends.openai import OpenAIBackend
from paragen.backends.scripted import ScriptedBackend

PROBLEM = Problem(id="p", question="What is 7 + 5?")


@pytest.fixture
def inner(serve: Serve) -> Iterator[str]:
    with serve(ScriptedBackend(counting_responder), max_samples_per_request=16) as url:
        yield url


def totals(url: str) -> dict[str, Any]:
    data: dict[str, Any] = httpx.get(url.removesuffix("/v1") + "/health").json()
    return data


def run_outer(url: str, strategy: str, options: dict[str, Any], model: str | None = None) -> StrategyResult:
    async def go() -> StrategyResult:
        backend = OpenAIBackend.from_spec(url, api_key_env=None, model=model)
        try:
            orchestrator = Orchestrator(backend, defaults=SamplingParams(seed=0, max_tokens=64))
            return await orchestrator.run(build_strategy(strategy, options), PROBLEM)
        finally:
            await backend.aclose()

    return anyio.run(go)


def test_outer_strategy_over_inner_pass_through(inner: str) -> None:
    result = run_outer(inner, "majority", {"n": 4})
    served = totals(inner)
    assert result.answer == "12" and served["runs_total"] == 4  # each outer sample: one inner run
    assert result.usage.total_tokens == served["completion_tokens_total"] > 0
    assert result.usage.prompt_tokens == served["prompt_tokens_total"] > 0
    assert {t.count_source for t in result.traces} == {"server"}  # the inner server's counts, exact


def test_inner_strategy_counted_whole_by_the_outer_sample(inner: str) -> None:
    result = run_outer(inner, "single", {}, model="majority-5/scripted")
    served = totals(inner)
    [trace] = result.traces
    assert served["runs_total"] == 1 and result.answer == "12"
    # One outer sample stands for the five samples the inner server ran, tokens and all.
    assert trace.completion_tokens == served["completion_tokens_total"] == result.usage.total_tokens
    assert result.usage.prompt_tokens == served["prompt_tokens_total"]
    assert trace.completion_tokens > 5 * 10  # five samples of at least ten tokens each


def test_outer_ffs_cancels_inner_runs(serve: Serve) -> None:
    def spread(request: Any, index: int) -> Any:
        from paragen.backends.scripted import Script

        steps = " ".join(["step"] * 30 * (request.params.seed or 0))
        return Script(text=f"{steps} The answer is \\boxed{{12}}.", token_delay=0.01)

    backend = ScriptedBackend(spread)
    with serve(backend) as url:
        result = run_outer(url, "ffs", {"n": 3, "temperature": None})
        wait = _settled(url)
    assert result.answer == "12" and sorted(t.status for t in result.traces) == [
        "cancelled",
        "cancelled",
        "ok",
    ]
    assert wait["runs_running"] == 0 and wait["samples_running"] == 0
    assert all(s.closed is not None for s in backend.streams)
    # The cancelled inner samples stopped early: far fewer tokens than their 34 and 64 would take.
    assert sum(s.tokens_sent for s in backend.streams) < 4 + 34 + 64 - 30


def _settled(url: str) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while (data := totals(url))["runs_running"] and time.monotonic() < deadline:
        time.sleep(0.02)
    return data
