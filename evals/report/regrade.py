"""``paragen report --regrade``: grades recomputed from the records alone, no strategy run.

Answers are re-graded by math-verify. Proofs (records a judge graded) are re-graded by the judges
given with ``--judge`` (evals.run.judging), concurrently; without ``--judge`` they keep their
recorded grades. The judges are built, used and closed in one event loop (an HTTP client's
connections belong to the loop that opened them). The original records are never written over:
the re-graded proof records, the new judges' reasoning included, go to ``regrade.jsonl`` beside
them (written whole, then renamed into place, so a reader sees the previous file or the new one),
and the report counts them.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import anyio

from evals.run.grading import Grader
from evals.run.judging import Judge, grade_proof, judge_params
from evals.run.records import EvalRecord, GradeRecord
from paragen.cli_options import BackendChoice
from paragen.named_backends import close_backends

REGRADE_FILE = "regrade.jsonl"
_IN_FLIGHT = 8  # proofs judged at once


def is_proof(record: EvalRecord) -> bool:
    return record.grade.judges is not None or "guideline" in record.problem.meta


def regrade(
    records: list[EvalRecord], grader: Grader, judges: Sequence[BackendChoice] = ()
) -> list[EvalRecord]:
    """The records with their grades recomputed from what they hold (no model runs but the judges)."""
    answers = [i for i, r in enumerate(records) if not is_proof(r)]
    grades = grader.grade_many([(records[i].result, records[i].problem.gold) for i in answers])
    regraded = list(records)
    for i, grade in zip(answers, grades, strict=True):
        regraded[i] = records[i].model_copy(update={"grade": GradeRecord.model_validate(grade.as_dict())})
    proofs = [i for i, r in enumerate(records) if is_proof(r)]
    if judges and proofs:
        for i, record in zip(
            proofs, anyio.run(_judge_all, [records[i] for i in proofs], judges), strict=True
        ):
            regraded[i] = record
    return regraded


async def _judge_all(records: list[EvalRecord], choices: Sequence[BackendChoice]) -> list[EvalRecord]:
    judges: list[Judge] = []
    try:
        judges.extend(Judge(choice.shown, choice.build()) for choice in choices)
        return await _judged(records, judges)
    finally:
        await close_backends([judge.backend for judge in judges])


async def _judged(records: list[EvalRecord], judges: Sequence[Judge]) -> list[EvalRecord]:
    done: list[EvalRecord] = list(records)
    limit = anyio.CapacityLimiter(_IN_FLIGHT)

    async def one(index: int) -> None:
        record = records[index]
        async with limit:
            grade = await grade_proof(
                judges, record.problem, record.result, judge_params(record.sampling.max_tokens)
            )
        done[index] = record.model_copy(update={"grade": GradeRecord.model_validate(grade.as_dict())})

    async with anyio.create_task_group() as group:
        for index in range(len(records)):
            group.start_soon(one, index)
    return done


def write_regraded(run_dir: Path, records: Sequence[EvalRecord]) -> Path | None:
    """The re-graded proof records in ``run_dir/regrade.jsonl``, replaced whole; None when there are none."""
    proofs = [r for r in records if is_proof(r)]
    if not proofs:
        return None
    target = run_dir / REGRADE_FILE
    # A temporary file of its own: two re-grades at once each write theirs whole, the last rename wins.
    handle, name = tempfile.mkstemp(dir=run_dir, prefix=f".{REGRADE_FILE}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as fh:
            fh.writelines(r.to_line() for r in proofs)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(name, target)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return target
