"""paragen.solve / asolve / run_sync, end to end on the scripted backend (its arithmetic responder)."""

from __future__ import annotations

import re

import pytest

import paragen
from paragen import Orchestrator, Problem, RunContext, StrategyResult
from paragen._api import run_sync
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.errors import ConfigError, PluginNotFoundError
from paragen.strategy import BaseStrategy, StrategyConfig
from strategies.majority import Majority


def test_solve_builds_the_backend_from_a_spec_and_answers() -> None:
    # arithmetic_responder: seeds 0..3 give 5, 5, 5 and (every fourth sample slips) 6
    result = paragen.solve("What is 2 + 3?", strategy="majority", backend="scripted", n=4)
    assert result.answer == "5"
    assert result.strategy == "majority"
    assert result.usage.num_samples == 4
    assert sorted(t.answer or "" for t in result.traces) == ["5", "5", "5", "6"]


def test_solve_is_run_sync() -> None:
    assert paragen.solve is run_sync


def test_solve_with_a_backend_object_leaves_it_open() -> None:
    backend = ScriptedBackend([Script(text="so \\boxed{7}")])
    first = run_sync(Problem(id="q1", question="x"), strategy="single", backend=backend)
    second = run_sync("y", strategy="single", backend=backend)  # still usable: solve did not close it
    assert (first.answer, first.problem_id, second.answer) == ("7", "q1", "7")
    assert len(backend.streams) == 2


def test_solve_reports_an_unknown_backend_by_name() -> None:
    with pytest.raises(PluginNotFoundError, match="nonesuch"):
        paragen.solve("What is 2 + 3?", backend="nonesuch")


@pytest.mark.anyio
async def test_asolve_takes_a_strategy_object_sampling_and_budget() -> None:
    backend = ScriptedBackend([Script(text=" ".join(["w"] * 50))])
    result = await paragen.asolve(
        "q",
        strategy=paragen.build_strategy("majority", {"n": 3}),
        backend=backend,
        sampling=paragen.SamplingParams(max_tokens=5, seed=1),
        budget=paragen.Budget(max_total_tokens=1000),
    )
    assert [t.completion_tokens for t in result.traces] == [5, 5, 5]  # max_tokens reached the backend
    assert sorted(s.request.params.seed or 0 for s in backend.streams) == [1, 2, 3]  # opened in any order


class _Boom(Exception):
    pass


class _OneSample(BaseStrategy[StrategyConfig]):
    name = "one_sample_test"

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        trace = await ctx.sample(ctx.request(prompt=problem.question))
        return ctx.finish(trace.text)


@pytest.mark.anyio
async def test_an_error_while_a_fanout_starts_is_the_error_raised() -> None:
    """A failure after the fan-out entered its task group must surface as itself, not as anyio's
    "Attempted to exit a cancel scope that isn't the current task's current cancel scope"."""

    def sink(event: object) -> None:
        raise _Boom("the event sink broke")

    backend = ScriptedBackend([Script(text="a")])
    orchestrator = Orchestrator(backend, on_event=sink)
    with pytest.raises(_Boom, match="the event sink broke"):
        await orchestrator.run(_OneSample(), Problem(question="q"))
    assert backend.streams == []  # nothing was started


@pytest.mark.anyio
async def test_orchestrator_run_takes_a_strategy_name_and_a_question_text() -> None:
    orch = Orchestrator(ScriptedBackend([Script(text="so \\boxed{12}")]))
    by_name = await orch.run("majority", Problem(id="q", question="What is 7 + 5?"))
    by_text = await orch.run(Majority(n=2), "What is 7 + 5?")
    assert (by_name.strategy, by_name.answer, by_text.answer) == ("majority", "12", "12")
    assert [r.answer for r in await orch.run_many("single", ["What is 7 + 5?", "And 5 + 7?"])] == ["12", "12"]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("strategy", "problem", "message"),
    [
        (42, "What is 7 + 5?", "expected a Strategy or a registered strategy name, got int"),
        ("majority", 7, "expected a Problem or a question's text, got int"),
        ("majority", "  ", "the question is empty"),
        ("nonesuch", "What is 7 + 5?", "unknown strategy 'nonesuch'"),
    ],
)
async def test_orchestrator_run_refuses_other_inputs_with_a_config_error(
    strategy: object, problem: object, message: str
) -> None:
    orch = Orchestrator(ScriptedBackend([Script(text="so \\boxed{12}")]))
    with pytest.raises(ConfigError, match=re.escape(message)):
        await orch.run(strategy, problem)  # type: ignore[arg-type]
