"""Strategies on reasoning models: the server's thinking budget where the backend has one, the
client-side method elsewhere, and continuations that go on thinking where a sample stopped."""

from __future__ import annotations

import pytest
from strategy_helpers import PROBLEM, SYNC, run, samples, words

from paragen.backends.base import Capabilities
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.orchestrator import Orchestrator
from paragen.types import GenerateRequest, SamplingParams
from strategies.budget_forcing import BudgetForcing
from strategies.dynasor import Dynasor
from strategies.nothinking import NoThinking
from strategies.single import Single

pytestmark = pytest.mark.anyio
BUDGETED = SYNC.model_copy(update={"thinking_budget": True})


def _prefill(request: GenerateRequest) -> str:
    return request.messages[-1].content if request.messages and request.continue_final else ""


async def test_budget_forcing_cap_asks_the_server_to_end_the_thinking() -> None:
    backend = ScriptedBackend([Script(reasoning=words(50, "3"), text="So \\boxed{7}")], capabilities=BUDGETED)
    result, _ = await run(BudgetForcing(think_tokens=10), backend)
    (trace,) = samples(result)
    assert backend.streams[0].request.thinking_budget == 10  # one request: the server cut the thinking
    assert (trace.reasoning_tokens, trace.answer_tokens, trace.text) == (10, 2, "So \\boxed{7}")
    assert result.answer == "7" and result.metrics["server"] == 1.0 and result.metrics["forced"] == 1.0


async def test_budget_forcing_ignores_a_box_written_while_thinking_and_forces_the_answer() -> None:
    def responder(request: GenerateRequest, index: int) -> Script:
        if _prefill(request).endswith("\\boxed{"):
            return Script(text="9}")
        return Script(text="<think> so \\boxed{3} then</think> It is \\boxed{4}")

    result, backend = await run(BudgetForcing(think_tokens=100), ScriptedBackend(responder))
    think, _ = samples(result)
    assert (think.thinking, think.reasoning, think.text) == ("open", " so \\boxed{3} then", "")
    forced = _prefill(backend.streams[1].request)
    assert forced.startswith("<think> so \\boxed{3} then\n</think>\n")  # the raw thought, closed once
    assert result.answer == "9" and result.metrics["forced"] == 1.0


async def test_budget_forcing_extend_continues_the_thought_without_a_second_opener() -> None:
    def responder(request: GenerateRequest, index: int) -> Script:
        prefill = _prefill(request)
        if prefill.endswith("\\boxed{"):
            return Script(text="9}")
        return Script(text="more</think>" if prefill else "<think> first</think>")

    result, backend = await run(BudgetForcing(mode="extend", waits=1), ScriptedBackend(responder))
    _, second, _ = samples(result)
    assert second.thinking == "open" and second.reasoning == "more"  # the prefill opened the thought
    assert _prefill(backend.streams[2].request).startswith("<think> first\nWaitmore\n</think>")
    assert result.answer == "9"


async def test_nothinking_asks_the_server_for_no_thinking_where_it_can() -> None:
    result, backend = await run(NoThinking(n=2), [Script(text="\\boxed{5}")] * 2, caps=BUDGETED)
    request = backend.streams[0].request
    assert request.thinking_budget == 0 and not request.continue_final
    assert result.answer == "5" and result.metrics["server_budget"] == 1.0


async def test_dynasor_stops_a_sample_at_its_thinking_budget_with_a_probes_answer() -> None:
    def responder(request: GenerateRequest, index: int) -> Script:
        if request.continue_final:  # a probe, continuing the raw thought
            assert _prefill(request).startswith("<think> step0")
            return Script(text="42}")
        return Script(text="<think> " + words(60, "3"))

    backend = ScriptedBackend(responder, capabilities=SYNC)
    orch = Orchestrator(backend, defaults=SamplingParams(max_tokens=128))
    result = await orch.run(Dynasor(interval=100, thinking_tokens=8), PROBLEM)
    (trace,) = samples(result)
    assert (trace.status, trace.cancel_reason, trace.completion_tokens) == ("ok", "thinking budget", 8)
    assert trace.answer == "42" and result.answer == "42" and result.usage.num_probes == 1


async def test_dynasor_passes_its_thinking_budget_to_a_server_that_enforces_one() -> None:
    backend = ScriptedBackend([Script(reasoning=words(30), text="\\boxed{6}")], capabilities=BUDGETED)
    result, _ = await run(Dynasor(interval=100, thinking_tokens=5), backend)
    assert backend.streams[0].request.thinking_budget == 5
    assert samples(result)[0].reasoning_tokens == 5 and result.answer == "6"


async def test_without_a_server_budget_the_request_carries_none() -> None:
    result, backend = await run(
        NoThinking(n=1), [Script(text="\\boxed{5}")], caps=Capabilities(continue_final=True)
    )
    assert backend.streams[0].request.thinking_budget is None and result.metrics["prefilled"] == 1.0


async def test_the_finisher_closes_a_thought_cut_off_and_reads_its_answer() -> None:
    def responder(request: GenerateRequest, index: int) -> Script:
        if request.continue_final:
            assert _prefill(request).startswith("<think> step0 step1 \\boxed{3}</think>")
            return Script(text="7}")
        return Script(text="<think> step0 step1 \\boxed{3} step3 step4 step5")

    backend = ScriptedBackend(responder, capabilities=SYNC)
    orch = Orchestrator(backend, defaults=SamplingParams(max_tokens=4))
    result = await orch.run(Single(finisher=True), PROBLEM)
    sample, finisher = samples(result)
    assert (sample.thinking, sample.finish_reason, sample.answer) == ("open", "length", None)
    assert finisher.thinking == "none" and result.answer == "7"  # not the box written while thinking
