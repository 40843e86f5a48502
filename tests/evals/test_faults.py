"""20% of requests fail (5xx, 429, reset, timeout, malformed chunk); the eval records everything."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from evals_helpers import register_test_strategies

from evals.run.combos import build_combos
from evals.run.records import read_records
from evals.run.runner import run_eval
from evals.run.spec import BackendSetup, EvalSpec, Execution, RunFolder, Sampling
from evals.tasks import Selection, get_task, load_task
from paragen.backends.scripted import Script, ScriptedBackend, arithmetic_responder
from paragen.types import GenerateRequest, SamplingParams

FAILURES = ("http500", "http429", "reset", "timeout", "malformed")


class FlakyResponder:
    """The arithmetic responder, but one request in five fails, cycling through the failure kinds."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.calls = self.failed = 0

    def __call__(self, request: GenerateRequest, index: int) -> Script:
        self.calls += 1
        script = arithmetic_responder(request, index)
        if self.rng.random() >= 0.2:
            return script
        kind = FAILURES[self.failed % len(FAILURES)]
        self.failed += 1
        return script.model_copy(update={"fail": kind, "fail_after": 3})


@pytest.mark.anyio
async def test_eval_with_failing_requests_records_every_problem(tmp_path: Path) -> None:
    register_test_strategies()
    task = get_task("arith")
    loaded = load_task(task, Selection(limit=40))
    problems = loaded.problems
    responder = FlakyResponder()
    spec = EvalSpec(
        task=task,
        problems=problems,
        data=loaded.source,
        combos=build_combos(["t_single", "t_vote"], [4]),
        backend=BackendSetup("scripted(flaky)"),
        folder=RunFolder(tmp_path),
        sampling=Sampling(SamplingParams(seed=1)),
        execution=Execution(max_concurrent=8, progress=False),
    )
    records = await run_eval(spec, ScriptedBackend(responder))

    assert len(records) == len(read_records(tmp_path)) == 80
    assert [r.problem.id for r in records[:40]] == [p.id for p in problems]  # input order
    assert 0.1 < responder.failed / responder.calls < 0.3
    errors = [t.error or "" for r in records for t in r.result.traces if t.status == "error"]
    assert len(errors) == responder.failed
    for needle in ("HTTP 500", "HTTP 429", "reset", "timeout", "malformed"):
        assert any(needle in e for e in errors), needle
    single_errors = [r.grade for r in records if r.strategy == "t_single" and r.grade.outcome == "error"]
    assert single_errors and all(g.cause for g in single_errors)
    assert {r.grade.outcome for r in records} <= {"correct", "incorrect", "error"}
    assert sum(r.grade.correct for r in records) > 40  # the vote rides over failed siblings
