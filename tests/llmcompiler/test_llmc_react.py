"""The ReAct baseline on the synthetic task: same tools, one call at a time, slower than LLMCompiler."""

from __future__ import annotations

import itertools

import anyio
import pytest

from evals.tasks.synthetic import SyntheticTask
from paragen.backends.scripted import ScriptedBackend
from paragen.orchestrator import Orchestrator
from paragen.types import Problem
from strategies.llmcompiler import LLMCompiler, ReAct


@pytest.fixture
def task() -> SyntheticTask:
    keys = [["alpha", "beta", "gamma"]]
    return SyntheticTask(keys=keys, latencies=dict.fromkeys(keys[0], 0.2), token_delay=0.0, first_delay=0.02)


@pytest.mark.anyio
async def test_react_calls_tools_one_after_another(task: SyntheticTask) -> None:
    problem = task.problems()[0]
    with anyio.fail_after(10):
        result = await Orchestrator(task.backend()).run(ReAct(toolbox=task.toolbox()), problem)
    assert result.answer == problem.gold and result.metrics["steps"] == 5
    tools = sorted((t for t in result.traces if t.kind == "tool"), key=lambda t: t.start)
    assert [t.label for t in tools] == ["tool:fetch"] * 3 + ["tool:calculator"]
    for before, after in itertools.pairwise(tools):
        assert before.end is not None and after.start >= before.end  # strictly sequential


@pytest.mark.anyio
async def test_llmcompiler_beats_react_on_the_parallel_task(task: SyntheticTask) -> None:
    problem = task.problems()[0]
    orch = Orchestrator(task.backend())
    with anyio.fail_after(10):
        fast = await orch.run(LLMCompiler(toolbox=task.toolbox()), problem)
        slow = await orch.run(ReAct(toolbox=task.toolbox()), problem)
    assert fast.answer == slow.answer == problem.gold
    assert slow.usage.latency_s > 2 * fast.usage.latency_s  # 3 x 0.2 s in series vs 0.2 s at once
    assert abs(fast.usage.latency_s - task.ideal_llmcompiler_s(task.keys[0])) < 0.06


@pytest.mark.anyio
async def test_react_gives_up_after_max_steps_and_reports_bad_actions() -> None:
    scripted = ScriptedBackend(["Thought: hmm\nAction: teleport(1)", "Thought: hmm, no action"])
    result = await Orchestrator(scripted).run(
        ReAct(tools=("calculator",), max_steps=3), Problem(question="q?")
    )
    assert result.answer is None and "no Finish" in f"{result.error} {result.text}"
    assert "There is no tool 'teleport'" in (result.text or "") and "Invalid format" in (result.text or "")
