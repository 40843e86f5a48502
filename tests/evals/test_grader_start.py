"""The grading processes are up before the first problem runs, so their start-up is in no latency."""

from __future__ import annotations

from pathlib import Path

import pytest

from evals.run.combos import build_combos
from evals.run.grading import Grader
from evals.run.runner import run_eval
from evals.run.spec import BackendSetup, EvalSpec, Execution, RunFolder, Sampling
from evals.tasks import Selection, get_task, load_task
from paragen._context import RunContext
from paragen.backends.scripted import ScriptedBackend, arithmetic_responder
from paragen.prompts import solve_messages
from paragen.registry import STRATEGY_GROUP, register
from paragen.strategy import BaseStrategy, StrategyConfig
from paragen.types import Problem, SamplingParams, StrategyResult

EVENTS: list[str] = []


class Watched(BaseStrategy[StrategyConfig]):
    """One sample; notes when it starts."""

    name = "t_watched"
    Config = StrategyConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        EVENTS.append("problem")
        trace = await ctx.sample(ctx.request(messages=solve_messages(problem.question)))
        return ctx.finish(trace.text.strip().split()[-1] if trace.is_ok else None, text=trace.text)


@pytest.mark.anyio
async def test_the_grader_is_warm_before_any_problem_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(STRATEGY_GROUP, "t_watched", Watched)
    EVENTS.clear()
    started = Grader.wait_started

    def wait_started(self: Grader) -> None:
        started(self)
        EVENTS.append("grader ready")

    monkeypatch.setattr(Grader, "wait_started", wait_started)
    task = get_task("arith")
    loaded = load_task(task, Selection(limit=3))
    spec = EvalSpec(
        task=task,
        problems=loaded.problems,
        data=loaded.source,
        combos=build_combos(["t_watched"], [1]),
        backend=BackendSetup("scripted"),
        folder=RunFolder(tmp_path),
        sampling=Sampling(SamplingParams(seed=1)),
        execution=Execution(progress=False),
    )
    records = await run_eval(spec, ScriptedBackend(arithmetic_responder))

    # The first "problem" is preflight's dry run, stopped at its first sample before anything is
    # generated; every real problem starts after the grader is ready.
    assert EVENTS == ["problem", "grader ready", "problem", "problem", "problem"]
    assert len(records) == 3 and {r.grade.outcome for r in records} <= {"correct", "incorrect"}
