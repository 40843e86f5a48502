"""The task fetching unit and the strategy loop on DAGs with known tool latencies (scripted planner)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import anyio
import pytest
from llmc_helpers import TOOLBOX, backend, role_responder

from paragen.backends.scripted import Script, ScriptedBackend
from paragen.orchestrator import Orchestrator
from paragen.types import GenerateRequest, Problem, StrategyResult, Trace
from strategies.llmcompiler import LLMCompiler

PROBLEM = Problem(id="p", question="What is the combined value?")
FINISH = "Thought: done.\nAction: Finish(42)"
TOLERANCE_S = 0.06

# 1 (0.30) ----------------\
# 2 (0.10) -> 3 (0.10) ----> 4 (0.10)      critical path: 1 -> 4 = 0.40 s
# 5 (0.20)                                 (2 -> 3 -> 4 is 0.30 s)
DAG = """1. wait(0.3, "a")
2. wait(0.1, "b")
3. wait(0.1, "$2$2")
4. wait(0.1, "$1-${3}")
5. wait(0.2, "e")
6. join()<END_OF_PLAN>"""


@pytest.fixture(autouse=True)
def no_collection_pause() -> Iterator[None]:
    """These tests time a schedule to 20 ms; a full garbage collection late in a long test session
    (torch and transformers loaded) stalls the event loop for far longer than that, and a tool then
    starts late. Collected before, none during."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def run(strategy: LLMCompiler, scripted: ScriptedBackend, problem: Problem = PROBLEM) -> StrategyResult:
    with anyio.fail_after(10):  # a hang is a failure, never a stuck test run
        return await Orchestrator(scripted).run(strategy, problem)


def failure(result: StrategyResult) -> str:
    """Why the run gave no answer (the strategy sets error and text; the orchestrator may keep only text)."""
    assert result.answer is None
    return f"{result.error} {result.text}"


def tools_of(result: StrategyResult) -> dict[int, Trace]:
    return {t.meta["idx"]: t for t in result.traces if t.kind == "tool"}


@pytest.mark.anyio
@pytest.mark.parametrize("stream_plan", [True, False])
async def test_dag_runs_with_maximal_parallelism_in_critical_path_time(stream_plan: bool) -> None:
    result = await run(LLMCompiler(toolbox=TOOLBOX, stream_plan=stream_plan), backend([DAG], [FINISH]))
    assert result.answer == "42"
    spans = tools_of(result)
    first = min(s.start for s in spans.values())
    # everything without dependencies starts at once; dependents start the moment their inputs are done
    for idx in (1, 2, 5):
        assert spans[idx].start - first < 0.02
    assert abs(spans[3].start - spans[2].end) < 0.02  # type: ignore[operator]
    assert abs(spans[4].start - max(spans[1].end, spans[3].end)) < 0.02  # type: ignore[type-var,operator]
    wall = max(s.end for s in spans.values()) - first  # type: ignore[type-var,operator]
    assert abs(wall - 0.4) < TOLERANCE_S
    assert abs(result.metrics["dag_critical_path_s"] - 0.4) < TOLERANCE_S
    assert result.metrics["tool_time_s"] > 0.75  # 0.8 s of tool work ran in about 0.4 s
    assert spans[4].text == "a-bb"  # several references in one argument, each substituted
    assert set(spans[4].parents) >= {spans[1].id, spans[3].id}


@pytest.mark.anyio
async def test_streaming_starts_actions_while_the_plan_is_still_being_written() -> None:
    plan = DAG.replace("6. join()", "Thought: " + "padding " * 40 + "\n6. join()")
    result = await run(LLMCompiler(toolbox=TOOLBOX), backend([plan], [FINISH], token_delay=0.01))
    planner = next(t for t in result.traces if t.label == "planner")
    spans = tools_of(result)
    assert planner.end is not None and planner.end > 0.5
    assert spans[1].start < 0.2 < planner.end  # the first action ran long before the planner finished
    assert all(s.end is not None and s.end < planner.end for s in spans.values())


@pytest.mark.anyio
async def test_joiner_replan_carries_the_previous_plan_observations_and_thought() -> None:
    seen: list[GenerateRequest] = []
    plans = ['1. wait(0, "17")\n2. join()', '1. calculator("17 * 2")\n2. join()']
    joins = [
        "Thought: I still need to double it.\nAction: Replan(double 17)",
        "Thought: done.\nAction: Finish(34)",
    ]
    result = await run(LLMCompiler(toolbox=TOOLBOX, max_replans=2), backend(plans, joins, seen=seen))
    assert result.answer == "34" and result.metrics["replans"] == 1
    second_plan = [r for r in seen if r.messages and r.messages[0].content.startswith("Make a plan")][1]
    context = second_plan.messages[-1].content  # type: ignore[index]
    assert "Previous Plan:" in context and '1. wait(0, "17")' in context and "Observation: 17" in context
    assert "Thought: I still need to double it." in context and context.rstrip().endswith("Current Plan:")


@pytest.mark.anyio
async def test_a_replan_in_the_final_round_is_the_answer() -> None:
    joins = ["Thought: not enough.\nAction: Replan(more)"]
    result = await run(
        LLMCompiler(toolbox=TOOLBOX, max_replans=1), backend(['1. wait(0, "x")\n2. join()'], joins)
    )
    assert result.answer == "more"  # as the reference code: the last round cannot replan


@pytest.mark.anyio
async def test_a_failed_planner_is_replanned_with_what_it_wrote() -> None:
    seen: list[GenerateRequest] = []
    respond = role_responder(
        ['1. wait(0, "x")\n2. jo', '1. calculator("6 * 7")\n2. join()'], [FINISH], seen=seen
    )

    def first_plan_fails(request: GenerateRequest, index: int) -> Script:
        script = respond(request, index)
        return script.model_copy(update={"fail": "http500"}) if len(seen) == 1 else script

    result = await run(LLMCompiler(toolbox=TOOLBOX, max_replans=2), ScriptedBackend(first_plan_fails))
    assert result.answer == "42" and result.metrics["plan_errors"] == 1
    context = next(
        r.messages[-1].content for r in seen if r.messages and "Previous Plan" in r.messages[-1].content
    )
    assert "not run: the planner failed" in context


@pytest.mark.anyio
async def test_join_ends_the_plan_and_stops_the_planner() -> None:
    plan = '1. wait(0, "x")\n2. join()\n' + "\n".join(f'{i}. wait(5, "never")' for i in range(3, 200))
    start = anyio.current_time()
    result = await run(LLMCompiler(toolbox=TOOLBOX), backend([plan], [FINISH], token_delay=0.005))
    assert anyio.current_time() - start < 1.0  # the rest of the plan is neither waited for nor run
    planner = next(t for t in result.traces if t.label == "planner")
    assert planner.status == "pruned" and planner.cancel_reason == "plan complete"
    assert sorted(tools_of(result)) == [1] and result.answer == "42"


@pytest.mark.anyio
async def test_a_failing_tool_becomes_an_error_observation_and_the_plan_goes_on() -> None:
    plan = '1. calculator("1/0")\n2. calculator("2 + 2")\n3. wait(0, "$1 and $2")\n4. join()'
    result = await run(LLMCompiler(toolbox=TOOLBOX), backend([plan], [FINISH]))
    spans = tools_of(result)
    assert spans[1].status == "error" and "division by zero" in (spans[1].error or "")
    assert spans[3].text == "Error: calculator: division by zero and 4"
    assert result.answer == "42" and result.metrics["tool_errors"] == 1


@pytest.mark.anyio
async def test_a_failing_planner_is_reported() -> None:
    from paragen.backends.scripted import Script

    scripted = ScriptedBackend([Script(text="x", fail="http500")])
    result = await run(LLMCompiler(toolbox=TOOLBOX), scripted)
    assert "planner failed" in failure(result)


@pytest.mark.anyio
async def test_a_slow_tool_times_out_into_an_error_observation() -> None:
    plan = '1. wait(5, "late")\n2. wait(0, "got: $1")\n3. join()'
    start = anyio.current_time()
    result = await run(LLMCompiler(toolbox=TOOLBOX, tool_timeout_s=0.2), backend([plan], [FINISH]))
    assert anyio.current_time() - start < 1.5
    spans = tools_of(result)
    assert spans[1].status == "error" and spans[2].text == "got: Error: wait timed out after 0.2s"
