"""The sweep: problems x strategies x n-values over one backend, recorded as each problem finishes.

Configurations run one after another (so their latencies are not mixed up); within one,
many problems are in flight under the orchestrator's limit. Each finished problem is
graded (in the grader's process pool, reached through a thread) and appended to the
records at once; the returned records are in input order.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from evals.grading import Grade, Grader
from evals.records import Key, RecordWriter, read_records, record_key, versions, write_run_info
from evals.tasks.base import Task
from paragen.backends.base import Backend
from paragen.config import Budget
from paragen.errors import ConfigError
from paragen.orchestrator import Orchestrator
from paragen.registry import build_backend as build_backend  # re-exported: evals.cli imports it here
from paragen.registry import load_strategy
from paragen.strategy import Strategy, build_strategy
from paragen.types import Problem, SamplingParams, StrategyResult


@dataclass(frozen=True)
class Combo:
    """One strategy configuration of the sweep (``n`` is 1 for strategies without an ``n``)."""

    name: str
    n: int
    strategy: Strategy


def build_combos(
    names: Sequence[str], ns: Sequence[int], options: dict[str, dict[str, Any]] | None = None
) -> list[Combo]:
    """Every strategy at every n (strategies whose Config has no ``n`` field run once)."""
    if not names:
        raise ConfigError("no strategy given", hint="pass e.g. -s single,majority")
    combos = []
    for name in names:
        extra = dict((options or {}).get(name, {}))
        if "n" not in load_strategy(name).Config.model_fields:
            combos.append(Combo(name, 1, build_strategy(name, extra)))
            continue
        combos.extend(_combos_over_n(name, ns, extra))
    return combos


def _combos_over_n(name: str, ns: Sequence[int], extra: dict[str, Any]) -> list[Combo]:
    """One combo per n; a strategy whose ``n`` only admits 1 (e.g. single) runs once at n=1."""
    if not _admits_many(name, extra):
        return [Combo(name, 1, build_strategy(name, {**extra, "n": 1}))]
    return [Combo(name, n, build_strategy(name, {**extra, "n": n})) for n in ns]


def _admits_many(name: str, extra: dict[str, Any]) -> bool:
    try:
        build_strategy(name, {**extra, "n": 2})
    except ConfigError:
        return False
    return True


@dataclass
class EvalSpec:
    """Everything a sweep needs besides the backend object."""

    task: Task
    problems: list[Problem]
    combos: list[Combo]
    out: Path
    backend_spec: str
    resume: bool = False
    max_concurrent: int = 8
    sampling: SamplingParams = field(default_factory=SamplingParams)
    budget: Budget = field(default_factory=Budget)  # per problem; a deadline records "deadline", never hangs
    seed: int = 0
    task_source: str = ""
    progress: bool = True
    grader_workers: int = 2


class _Tally:
    """Live accuracy and tokens for the progress bar."""

    def __init__(self) -> None:
        self.done = self.correct = self.tokens = 0

    def add(self, grade: Grade, result: StrategyResult) -> None:
        self.done += 1
        self.correct += grade.correct
        self.tokens += result.usage.total_tokens

    def text(self, combo: Combo) -> str:
        acc = self.correct / self.done if self.done else 0.0
        return f"{combo.name} n={combo.n} acc={acc:.0%} tok={self.tokens}"


async def run_eval(spec: EvalSpec, backend: Backend) -> list[dict[str, Any]]:
    """Run the sweep, appending a record per finished problem; returns all records in input order."""
    writer = RecordWriter.open(spec.out, resume=spec.resume)
    run_info = _run_info(spec)
    write_run_info(spec.out, run_info)
    orch = Orchestrator(
        backend, defaults=spec.sampling, budget=spec.budget, max_concurrent_problems=spec.max_concurrent
    )
    grader = Grader(workers=spec.grader_workers, equivalence=spec.task.equivalence)
    try:
        with _progress(spec.progress) as progress:
            for combo in spec.combos:
                await _run_combo(spec, combo, orch, grader, writer, run_info, progress)
    finally:
        await anyio.to_thread.run_sync(grader.close)
    return ordered_records(spec, read_records(spec.out))


async def _run_combo(
    spec: EvalSpec,
    combo: Combo,
    orch: Orchestrator,
    grader: Grader,
    writer: RecordWriter,
    run_info: dict[str, Any],
    progress: Progress,
) -> None:
    todo = [p for p in spec.problems if (spec.task.name, p.id, combo.name, combo.n) not in writer.done]
    tally = _Tally()
    bar = progress.add_task(
        tally.text(combo), total=len(spec.problems), completed=len(spec.problems) - len(todo)
    )
    if not todo:
        return
    async with orch.stream_many(combo.strategy, todo) as finished:
        async for index, result in finished:
            problem = todo[index]
            grades = await anyio.to_thread.run_sync(grader.grade_many, [(result, problem.gold)])
            record = make_record(spec, combo, problem, result, grades[0], run_info)
            await anyio.to_thread.run_sync(writer.append, record)
            tally.add(grades[0], result)
            progress.update(bar, advance=1, description=tally.text(combo))


def make_record(
    spec: EvalSpec,
    combo: Combo,
    problem: Problem,
    result: StrategyResult,
    grade: Grade,
    run_info: dict[str, Any],
) -> dict[str, Any]:
    """One JSONL record: the problem, the raw result (traces included), the grade and the run's settings."""
    return {
        "schema": 1,
        "run_id": run_info["run_id"],
        "task": spec.task.name,
        "grading_mode": spec.task.grading,
        "problem": problem.model_dump(mode="json"),
        "strategy": combo.name,
        "n": combo.n,
        "strategy_config": combo.strategy.config.model_dump(mode="json"),
        "result": result.model_dump(mode="json"),
        "grade": grade.as_dict(),
        "backend": spec.backend_spec,
        "sampling": spec.sampling.model_dump(mode="json"),
        "seed": spec.seed,
        "versions": run_info["versions"],
        "recorded_at": time.time(),
    }


def _run_info(spec: EvalSpec) -> dict[str, Any]:
    return {
        "run_id": uuid.uuid4().hex[:12],
        "task": spec.task.name,
        "task_source": spec.task_source,
        "backend": spec.backend_spec,
        "strategies": [
            {"name": c.name, "n": c.n, "config": c.strategy.config.model_dump(mode="json")}
            for c in spec.combos
        ],
        "problems": [p.id for p in spec.problems],
        "sampling": spec.sampling.model_dump(mode="json"),
        "budget": spec.budget.model_dump(mode="json"),
        "seed": spec.seed,
        "max_concurrent": spec.max_concurrent,
        "versions": versions(),
    }


def ordered_records(spec: EvalSpec, records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records of this sweep in input order: configuration by configuration, problem by problem."""
    by_key: dict[Key, dict[str, Any]] = {record_key(r): r for r in records}
    ordered = []
    for combo in spec.combos:
        for problem in spec.problems:
            found = by_key.get((spec.task.name, problem.id, combo.name, combo.n))
            if found is not None:
                ordered.append(found)
    return ordered


def _progress(enabled: bool) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        disable=not enabled,
        transient=False,
    )
