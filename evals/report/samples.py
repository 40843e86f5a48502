"""The report's per-sample rows: each setting's recorded samples graded once and summarized.

The samples of a record are its finished ("ok") samples in the order they finished (see
:func:`evals.analysis.bank.bank_from_record`); a setting run under several seeds pools them per
problem. What each column means is in :mod:`evals.analysis.sample_metrics`.

Reasoning tokens are a sample's ``reasoning_tokens`` where they were counted (its
``reasoning_count_source``): samples without thinking read as "not reported", never as 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from evals.analysis import bank as sample_bank
from evals.analysis.bank import BankProblem, Verdicts
from evals.analysis.sample_metrics import ProblemSamples, summarize_samples
from paragen.types import Trace

if TYPE_CHECKING:
    from evals.run.grading import Grader
    from evals.run.records import EvalRecord


def reasoning_tokens(trace: Trace) -> int | None:
    """The sample's thinking tokens where they were counted: a sample without a thinking section,
    or recorded before traces kept the split, reads as "not reported" (None), never as 0."""
    return None if trace.reasoning_count_source == "none" else trace.reasoning_tokens


def _pooled(records: Sequence[EvalRecord]) -> list[BankProblem]:
    """Each problem's samples over all records of a setting (several seeds: one after another)."""
    by_problem: dict[str, BankProblem] = {}
    for record in records:
        item = sample_bank.bank_from_record(record)
        seen = by_problem.get(item.problem_id)
        if seen is None:
            by_problem[item.problem_id] = item
        else:
            traces, answers = [*seen.traces, *item.traces], [*seen.answers, *item.answers]
            by_problem[item.problem_id] = BankProblem(seen.problem_id, seen.gold, traces, answers)
    return list(by_problem.values())


def problem_samples(item: BankProblem, verdicts: Verdicts) -> ProblemSamples:
    correct = [sample_bank.is_correct(item, a, verdicts) for a in item.answers]
    tokens = [t for t in (reasoning_tokens(trace) for trace in item.traces) if t is not None]
    return ProblemSamples(correct, item.answers, tokens)


def sample_rows(
    groups: dict[Any, list[EvalRecord]], grader: Grader, verdicts: Verdicts, folder: str = ""
) -> list[dict[str, Any]]:
    """One row per setting whose every problem has a sample; pairs not in ``verdicts`` are graded."""
    pooled = {key: _pooled(records) for key, records in groups.items()}
    missing = list(
        dict.fromkeys(
            p for items in pooled.values() for p in sample_bank.pairs_to_grade(items) if p not in verdicts
        )
    )
    known = {**verdicts, **sample_bank.verdict_table(missing, grader.compare_many(missing))}
    rows = []
    for (task, strategy, n, sid), items in pooled.items():
        summary = summarize_samples([problem_samples(item, known) for item in items])
        if summary is not None:
            ids = {"settings_id": sid, "run_id": groups[(task, strategy, n, sid)][0].run_id, "folder": folder}
            rows.append({"task": task, "strategy": strategy, "n": n, **ids, **summary.as_dict()})
    return rows
