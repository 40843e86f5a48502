"""Offline maj@n over a recorded majority run is exactly the live vote, record by record.

The records come from the real runner and the real ``majority`` strategy. The scripted
backend only decides what each sample says and when it finishes: answers split into ties
often, and samples finish out of start order, so the tie rule and the vote order matter.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from evals.analysis.bank import bank_from_record, expected_majority, pairs_to_grade, verdict_table
from evals.report.build import build_report
from evals.run.combos import build_combos
from evals.run.grading import Grader
from evals.run.runner import run_eval
from evals.run.spec import BackendSetup, EvalSpec, Execution, RunFolder, Sampling
from evals.tasks import Selection, get_task, load_task
from paragen.backends.scripted import Script, ScriptedBackend, arithmetic_responder
from paragen.types import GenerateRequest, SamplingParams


def tie_prone(request: GenerateRequest, index: int) -> Script:
    """Right, off by one or two, or no answer; a random delay so finish order shuffles."""
    right = arithmetic_responder(request, index).text.rsplit("{", 1)[1].rstrip("}.")
    rng = random.Random(f"{request.params.seed}:{request.messages or request.prompt}")
    value = int(right) + rng.choice([0, 0, 1, 2])
    text = rng.choice([f"So the answer is \\boxed{{{value}}}.", "I cannot tell."] if rng.random() < 0.2 else
                      [f"So the answer is \\boxed{{{value}}}."])  # fmt: skip
    return Script(text=text, first_delay=rng.choice([0.0, 0.004, 0.008, 0.012]), token_delay=0.001)


@pytest.mark.anyio
async def test_offline_majority_at_n_equals_the_live_vote(tmp_path: Path, grader: Grader) -> None:
    task = get_task("arith")
    loaded = load_task(task, Selection(limit=20))
    spec = EvalSpec(
        task=task,
        problems=loaded.problems,
        data=loaded.source,
        combos=build_combos(["majority"], [2, 4]),
        backend=BackendSetup("scripted(tie-prone)"),
        folder=RunFolder(tmp_path),
        sampling=Sampling(SamplingParams(seed=3)),
        execution=Execution(max_concurrent=8, progress=False),
    )
    records = await run_eval(spec, ScriptedBackend(tie_prone))
    assert len(records) == 40

    bank = [bank_from_record(r) for r in records]
    pairs = pairs_to_grade(bank)
    verdicts = verdict_table(pairs, grader.compare_many(pairs))
    ties = out_of_order = 0
    for record, item in zip(records, bank, strict=True):
        assert record.result.stop_reason == "done"
        offline = expected_majority(item, record.n, verdicts)
        assert offline == float(record.grade.correct), (record.problem.id, record.n, item.answers)
        counts = sorted((item.answers.count(a) for a in set(item.answers) if a), reverse=True)
        ties += len(counts) > 1 and counts[0] == counts[1]
        starts = [t.start for t in item.traces]
        out_of_order += starts != sorted(starts)
    assert ties >= 5 and out_of_order >= 5  # the cases where the tie rule and the order decide

    report = build_report(tmp_path)
    live = {r["n"]: r["accuracy"] for r in report["summary"]}
    offline_rows = {(r["source"], r["method"]): r["accuracy"] for r in report["offline"]}
    for n in (2, 4):
        assert offline_rows[(f"majority n={n}", f"maj@{n}")] == live[n]
