"""Dynasor: exact probe schedules, early stops, the vote over n samples and probe accounting (scripted)."""

from __future__ import annotations

import pytest
from strategy_helpers import PROBLEM, SYNC, samples, words

from paragen.backends.base import Capabilities
from paragen.backends.scripted import Script, ScriptedBackend, tokenize
from paragen.config import Budget
from paragen.errors import ConfigError
from paragen.orchestrator import Orchestrator
from paragen.types import GenerateRequest, SamplingParams, StrategyResult, Trace
from strategies.dynasor import PROBE_TEXT, Dynasor

LONG = words(40, "5")


def _prefix_tokens(request: GenerateRequest) -> int:
    """How many of the sample's tokens a probe request carries before the probe text."""
    content = request.messages[-1].content if request.messages else ""
    assert content.endswith(PROBE_TEXT)
    return len(tokenize(content[: -len(PROBE_TEXT)]))


def _backend(
    sample: str, probe: dict[int, str], default: str = "5}", caps: Capabilities = SYNC
) -> ScriptedBackend:
    def respond(request: GenerateRequest, index: int) -> Script:
        if not request.continue_final:
            return Script(text=sample)
        return Script(text=probe.get(_prefix_tokens(request), default))

    return ScriptedBackend(respond, capabilities=caps)


async def _run(strategy: Dynasor, backend: ScriptedBackend, **defaults: int) -> StrategyResult:
    return await Orchestrator(backend, defaults=SamplingParams(max_tokens=64, **defaults)).run(
        strategy, PROBLEM
    )


def _probes(result: StrategyResult) -> list[Trace]:
    return [t for t in result.traces if t.kind == "probe"]


@pytest.mark.anyio
async def test_probes_fire_every_interval_and_three_equal_answers_stop_the_sample() -> None:
    backend = _backend(LONG, {4: "4}"})  # the first probe says 4, every later one 5
    result = await _run(Dynasor(interval=4, probe_tokens=3, agree=3), backend)
    (sample,) = samples(result)
    probes = _probes(result)
    assert [p.meta["at"] for p in probes] == [4, 8, 12, 16]
    assert [p.answer for p in probes] == ["4", "5", "5", "5"]
    assert sample.completion_tokens == 16 and sample.status == "ok" and sample.cancel_reason == "certain"
    assert sample.answer == "5" and result.answer == "5"
    assert all(p.parents == [sample.id] and p.label == "probe" for p in probes)
    first = backend.streams[1].request
    assert first.continue_final and first.params.max_tokens == 3
    assert (first.params.temperature, first.params.top_p) == (0.6, 0.95)  # the reference's probe sampling
    assert first.messages is not None and first.messages[-1].role == "assistant"
    assert first.messages[-1].content == "".join(tokenize(LONG)[:4]) + PROBE_TEXT
    assert first.messages[:-1] == backend.streams[0].request.messages  # the sample's own prompt
    usage = result.usage
    assert (usage.total_tokens, usage.probe_tokens, usage.num_probes) == (16, 4, 4)
    assert usage.wasted_tokens == 0 and usage.num_samples == 1 and usage.sequential_tokens == 16
    assert result.metrics["probes"] == 4 and result.metrics["stopped_early"] == 1


@pytest.mark.anyio
async def test_a_hesitating_probe_breaks_the_run_of_equal_answers() -> None:
    backend = _backend(LONG, {12: "Hmm, 5}"})
    result = await _run(Dynasor(interval=4, agree=3), backend)
    assert [p.answer for p in _probes(result)] == ["5", "5", None, "5", "5", "5"]
    assert samples(result)[0].completion_tokens == 24 and result.answer == "5"


@pytest.mark.anyio
async def test_a_sample_that_finishes_before_agreeing_answers_from_its_text() -> None:
    backend = _backend(words(10, "7"), {4: "3}", 8: "4}"})
    result = await _run(Dynasor(interval=4, agree=3), backend)
    (sample,) = samples(result)
    assert [p.meta["at"] for p in _probes(result)] == [4, 8]  # none at the last token
    assert sample.completion_tokens == 10 and sample.cancel_reason is None and result.answer == "7"
    assert result.metrics["stopped_early"] == 0


@pytest.mark.anyio
async def test_with_n_samples_each_stops_on_its_own_then_they_vote() -> None:
    def respond(request: GenerateRequest, index: int) -> Script:
        seed = request.params.seed
        if request.continue_final:
            return Script(text="9}" if seed == 3 else "5}")
        return Script(text=words(6, "7") if seed == 3 else LONG)

    backend = ScriptedBackend(respond, capabilities=SYNC)
    result = await _run(Dynasor(n=3, interval=4, agree=3), backend, seed=1)
    by_seed = {s.request.params.seed or 0: s for s in backend.streams if not s.request.continue_final}
    assert sorted(by_seed) == [1, 2, 3] and all(s.request.n == 1 for s in by_seed.values())
    traces = samples(result)
    assert sorted(t.completion_tokens for t in traces) == [6, 12, 12]
    assert sorted(str(t.answer) for t in traces) == ["5", "5", "7"] and result.answer == "5"
    assert result.usage.num_probes == 3 + 3 + 1
    for trace in traces:
        assert all(p.parents == [trace.id] for p in _probes(result) if trace.id in p.parents)


@pytest.mark.anyio
async def test_a_backend_that_cannot_continue_a_reply_is_refused() -> None:
    backend = _backend(LONG, {}, caps=Capabilities())
    with pytest.raises(ConfigError, match="continuing its text"):
        await _run(Dynasor(), backend)


@pytest.mark.anyio
async def test_a_deadline_during_a_probe_closes_the_probe_and_the_sample() -> None:
    def respond(request: GenerateRequest, index: int) -> Script:
        if request.continue_final:
            return Script(text="5}", first_delay=30.0)
        return Script(text=LONG)

    backend = ScriptedBackend(respond, capabilities=SYNC)
    orch = Orchestrator(backend, defaults=SamplingParams(max_tokens=64), budget=Budget(deadline_s=0.3))
    result = await orch.run(Dynasor(interval=4), PROBLEM)
    assert result.stop_reason == "deadline" and len(backend.streams) == 2
    assert all(s.closed is not None for s in backend.streams)
    (probe,) = _probes(result)
    assert probe.status == "cancelled" and samples(result)[0].status == "cancelled"
