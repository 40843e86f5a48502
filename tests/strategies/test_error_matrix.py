"""Every built-in strategy x {budget hit on the first sample, deadline mid-run, a backend failing every
request, one failing mid-stream} ends in a StrategyResult with the right stop_reason.

The scripted backend plays the faults (tests/strategies/error_matrix.py); composites are included:
PDR with majority and FFS drafts, DeepPrune with the llm judge, LLMCompiler replanning. Hogwild!
runs on the scripted shared-cache backend, whose session fails its forward passes.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from error_matrix import SCENARIOS, STRATEGIES, Scenario, base_script, scripted, shared, strategy

from paragen import Orchestrator, Problem
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.types import GenerateRequest, SamplingParams, StrategyResult

pytestmark = pytest.mark.anyio

PROBLEM = Problem(id="p", question="What is 2 + 3?", gold="5")

# Where a failing backend does not end in "done" with no answer, and why. Everywhere else a failed
# sample is a trace with status "error" and the strategy finishes without an answer: "done", since
# the run itself did not fail (its accounting and traces are whole), the samples did.
FAILED_BACKEND_ENDS_IN_ERROR = {
    # the shared session raises the backend's error out of the strategy: classified as "error"
    "hogwild": "scripted",
    # the planner's sample failed, so its plan is empty (or cut): the strategy reports the bad plan
    "llmcompiler": "malformed plan",
    # every step's sample failed: no step ever says Finish, which the strategy reports as its error
    "react": "no Finish(answer)",
}


async def run(name: str, scenario: Scenario) -> StrategyResult:
    backend = shared(scenario) if name == "hogwild" else scripted(scenario)
    orch = Orchestrator(backend, defaults=SamplingParams(max_tokens=64, seed=0), budget=scenario.budget)
    return await orch.run(strategy(name), PROBLEM)


def expected(name: str, scenario: str) -> str:
    if scenario in ("budget", "deadline"):
        return scenario
    return "error" if name in FAILED_BACKEND_ENDS_IN_ERROR else "done"


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("name", STRATEGIES)
async def test_every_strategy_ends_in_a_result(name: str, scenario: str) -> None:
    result = await run(name, SCENARIOS[scenario])
    assert (result.stop_reason, result.answer) == (expected(name, scenario), None), result.error
    assert result.traces, "the traces so far are kept"
    generated = sum(t.completion_tokens for t in result.traces if t.kind != "score")
    assert result.usage.total_tokens == generated  # and their accounting, a verifier's apart
    scores = [t for t in result.traces if t.kind == "score"]
    assert result.usage.score_tokens == sum(t.completion_tokens + t.prompt_tokens for t in scores)
    assert all(t.end is not None for t in result.traces)  # nothing left running
    if scenario == "budget":
        assert generated >= 3
    if scenario == "deadline":
        assert 0.15 <= result.usage.latency_s < 1.0
        assert any(t.status == "cancelled" for t in result.traces)
    if scenario.startswith("fail"):
        samples = [t for t in result.traces if t.kind != "tool"]
        assert any(t.status == "error" for t in samples)
        if scenario == "fail_all":
            assert all(t.status in ("error", "cancelled") for t in samples)
        reason = FAILED_BACKEND_ENDS_IN_ERROR.get(name)
        assert reason is None or reason in (result.error or "")


def staggered() -> Callable[[GenerateRequest, int], Script]:
    """base_script's samples 10 ms apart by seed. Samples of one length finish in the same instant
    otherwise, and a first finisher (pdr+ffs's draft) is whichever the event loop runs first: on
    trio, which shuffles them, it may be seed 3's, whose answer the arithmetic responder slips."""
    respond = base_script()

    def delayed(request: GenerateRequest, index: int) -> Script:
        seed = (request.params.seed or 0) + index
        return respond(request, index).model_copy(update={"first_delay": 0.01 * (seed % 4)})

    return delayed


@pytest.mark.parametrize("name", ["llmcompiler", "pdr+majority", "pdr+ffs", "deepprune+llm"])
async def test_the_composites_do_compose_without_faults(name: str) -> None:
    """The matrix's composites are what they claim: LLMCompiler replans once, the others nest."""
    # A run seed: without one the scripted answers follow the process-wide request counter, so the
    # result would depend on which tests ran before.
    orch = Orchestrator(ScriptedBackend(staggered()), defaults=SamplingParams(max_tokens=64, seed=0))
    result = await orch.run(strategy(name), PROBLEM)
    assert result.stop_reason == "done" and result.answer == "5"
    if name == "llmcompiler":
        assert result.metrics["replans"] == 1
    elif name == "deepprune+llm":
        assert any(t.kind == "judge" for t in result.traces)  # the judge's own samples
    else:
        assert any("/" in t.label for t in result.traces)  # a sub-strategy's traces, labelled by it
