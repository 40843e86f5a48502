"""The sweep: problems x strategies x n-values over one backend, recorded as each problem finishes.

Configurations run one after another (so their latencies are not mixed up); within one,
many problems are in flight under the orchestrator's limit. Each finished problem is
graded (in the grader's process pool, reached through a thread) and appended to the
records at once; the returned records are in input order. A problem whose backend
failed is recorded with outcome "error"; one whose run raised (a bug in a strategy) is
recorded with outcome "failed" and the exception's type, message and traceback, and the
sweep goes on (``fail_fast`` stops it after recording the first). Neither is a result:
``--resume`` runs them again.
"""

from __future__ import annotations

import time
import traceback
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import anyio
import anyio.to_thread
from rich.progress import Progress, TaskID

from evals.run.combos import Combo
from evals.run.grading import Grade, Grader
from evals.run.judging import Judge, grade_proof, judge_params
from evals.run.preflight import check_sweep
from evals.run.progress import sweep_progress
from evals.run.prompts import PromptRecord, get_template, prompt_setting
from evals.run.records import (
    EvalRecord,
    GradeRecord,
    Key,
    RecordWriter,
    RunFailure,
    RunInfo,
    RunSettings,
    StrategyEntry,
    load_records,
    prepare_run,
    settings_id,
    versions,
    write_run_info,
)
from evals.run.shards import check_shard_resume, shard_info
from evals.run.spec import EvalSpec, owned_problems
from paragen.backends.base import Backend
from paragen.metrics import Metrics
from paragen.orchestrator import Orchestrator
from paragen.prompts import PromptTemplate, using_template
from paragen.types import Problem, SamplingParams, StrategyResult


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


MAX_TRACEBACK_CHARS = 20_000  # the end of a traceback is where it was raised


def run_settings(spec: EvalSpec) -> RunSettings:
    """What decides the results besides problem and strategy (secrets never enter it)."""
    return RunSettings(
        task=spec.task.name,
        data_sha256=spec.data.rows_sha256,
        grading_mode=spec.task.grading,
        backend=spec.backend.spec,
        backend_options=spec.backend.recorded_options(),
        backends={name: setup.spec for name, setup in spec.backends.items()},
        sampling=spec.sampling.setting(),
        budget=spec.sampling.budget,
        prompt=prompt_setting(spec_template(spec)),
    )


def spec_template(spec: EvalSpec) -> PromptTemplate:
    """The template the sweep asks in: the one given, else the task's default."""
    return spec.prompt or get_template(spec.task.prompt)


def fresh_run_info(spec: EvalSpec) -> RunInfo:
    info = _whole_run_info(spec)
    if spec.execution.shard is not None:
        info.shard = shard_info(info, spec.execution.shard)
    return info


def _whole_run_info(spec: EvalSpec) -> RunInfo:
    return RunInfo(
        run_id=uuid.uuid4().hex[:12],
        started_at=time.time(),
        settings=run_settings(spec),
        data=spec.data,
        strategies=[
            StrategyEntry(name=c.name, n=c.n, config=c.strategy.config.model_dump(mode="json"))
            for c in spec.combos
        ],
        problems=[p.id for p in spec.problems],
        seed=spec.shuffle_seed,
        max_concurrent=spec.execution.max_concurrent,
        versions=versions(),
        seeds=spec.sampling.seeds if len(spec.sampling.seeds) > 1 else [],
        prompt=PromptRecord.of(spec_template(spec)),
        preset=spec.preset,
        judges=spec.judges or None,
    )


async def run_eval(
    spec: EvalSpec,
    backend: Backend,
    judges: Sequence[Judge] = (),
    *,
    backends: Mapping[str, Backend] | None = None,
) -> list[EvalRecord]:
    """Run the sweep, appending a record per finished problem; returns this sweep's records in input order.
    ``backends``: the named ones strategies may read with (``spec.backends``), opened with ``backend``.

    A proof task is graded by ``judges`` (evals.run.judging), concurrently across problems.

    Settings are checked against a recorded run before anything is written (see
    :func:`evals.run.records.prepare_run`); problems recorded with a result are skipped and
    problems recorded as backend errors are run again.
    """
    # The orchestrator first: it refuses bad limits before the run folder is touched.
    metrics = Metrics()
    metrics.watch(backend)
    orch = Orchestrator(
        backend,
        defaults=spec.sampling.params,
        budget=spec.sampling.budget,
        max_concurrent_problems=spec.execution.max_concurrent,
        metrics=metrics,
        backends=backends,
    )
    # Opened (and probed) before the run folder is touched: a server that cannot be reached or
    # does not speak the API is one error here, not a folder of error records.
    try:
        with using_template(spec_template(spec)):  # the strategies' tasks inherit it
            return await _sweep(spec, orch, judges)
    finally:
        await orch.aclose()


async def _sweep(spec: EvalSpec, orch: Orchestrator, judges: Sequence[Judge]) -> list[EvalRecord]:
    grader = Grader(workers=spec.execution.grader_workers, equivalence=spec.task.equivalence)
    folder = spec.folder
    try:
        # The grading processes start and are waited for before any problem: started at the first
        # answer, they would take the CPU from the problems then in flight (the first strategy's latencies).
        if not spec.task.proof:  # judges grade proofs: no math-verify processes to start
            grader.start()
        await orch.open()
        for combo in spec.combos:  # a reward model that cannot be loaded fails here, before any record
            await orch.open_verifiers(combo.strategy)
        # Every configuration checked before anything is written: what cannot run ends it here.
        provenance = await check_sweep(spec, orch.backend, orch.backends)
        if not spec.task.proof:
            await anyio.to_thread.run_sync(grader.wait_started)
        fresh = fresh_run_info(spec).model_copy(update=provenance)
        check_shard_resume(folder.path, fresh)
        run_info = prepare_run(folder.path, fresh, resume=folder.resume, new_run=folder.new_run)
        writer = RecordWriter.open(folder.path)
        run_info.partial = True  # until the sweep has recorded every problem (a kill leaves it so)
        write_run_info(folder.path, run_info)
        try:
            with _progress(spec.execution.progress) as progress:
                sweep = _Sweep(spec, orch, grader, writer, run_info, progress, list(judges))
                for sampling in spec.sampling.passes():
                    orch.defaults = sampling
                    if await sweep.run_combos() and spec.execution.fail_fast:
                        break
            run_info.partial = not sweep_complete(spec, run_info)
        finally:
            if orch.metrics is not None:  # what this invocation ran, also when it was cut short
                run_info.metrics = orch.metrics.values()
            write_run_info(folder.path, run_info)  # partial stays True when the sweep was cut short
    finally:
        await anyio.to_thread.run_sync(grader.close)
    return ordered_records(spec, run_info, load_records(folder.path).latest())


@dataclass
class _Sweep:
    """A sweep under way: what it runs, and where its outcomes go (graded, recorded, shown)."""

    spec: EvalSpec
    orch: Orchestrator
    grader: Grader
    writer: RecordWriter
    run_info: RunInfo
    progress: Progress
    judges: list[Judge]
    _writing: anyio.Lock = field(default_factory=anyio.Lock)  # judged records are written from many tasks

    async def run_combos(self) -> bool:
        """Every configuration at the orchestrator's current seed; True when a problem's run raised."""
        failed = False
        for combo in self.spec.combos:
            failed = await self.run_combo(combo) or failed
            if failed and self.spec.execution.fail_fast:
                break
        return failed

    async def run_combo(self, combo: Combo) -> bool:
        """Run one configuration; True when a problem's run raised (with fail_fast: the first ends it)."""
        spec, run_info, sampling = self.spec, self.run_info, self.orch.defaults
        done = self.writer.done
        mine = owned_problems(spec, sampling.seed, combo)
        todo = [p for p in mine if combo_key(spec, run_info, combo, p, seed=sampling.seed) not in done]
        tally = _Tally()
        bar = self.progress.add_task(tally.text(combo), total=len(mine), completed=len(mine) - len(todo))
        failed = False
        judging = anyio.CapacityLimiter(spec.execution.max_concurrent)
        outcomes = self.orch.stream_outcomes(combo.strategy, todo)
        async with anyio.create_task_group() as proofs, outcomes as finished:
            async for index, outcome in finished:
                problem = todo[index]
                if isinstance(outcome, Exception):
                    failed = True
                    failure = failure_record(
                        spec, combo, problem, exc=outcome, run_info=run_info, sampling=sampling
                    )
                    await self._record(failure)
                    self.progress.update(bar, advance=1)
                    if spec.execution.fail_fast:
                        return True
                    continue
                if spec.task.proof:  # judged in the background: the next problems go on meanwhile
                    proofs.start_soon(self._judge, combo, problem, outcome, sampling, (judging, tally, bar))
                    continue
                grades = await anyio.to_thread.run_sync(self.grader.grade_many, [(outcome, problem.gold)])
                await self._finish(combo, problem, outcome, grades[0], sampling, tally, bar)
        return failed

    async def _judge(
        self,
        combo: Combo,
        problem: Problem,
        result: StrategyResult,
        sampling: SamplingParams,
        shown: tuple[anyio.CapacityLimiter, _Tally, TaskID],
    ) -> None:
        judging, tally, bar = shown
        async with judging:
            grade = await grade_proof(self.judges, problem, result, judge_params(sampling.max_tokens))
        await self._finish(combo, problem, result, grade, sampling, tally, bar)

    async def _finish(
        self,
        combo: Combo,
        problem: Problem,
        result: StrategyResult,
        grade: Grade,
        sampling: SamplingParams,
        tally: _Tally,
        bar: TaskID,
    ) -> None:
        """Record a graded result and show it."""
        record = make_record(
            self.spec, combo, problem, result=result, grade=grade, run_info=self.run_info, sampling=sampling
        )
        await self._record(record)
        tally.add(grade, result)
        self.progress.update(bar, advance=1, description=tally.text(combo))

    async def _record(self, record: EvalRecord) -> None:
        async with self._writing:
            await anyio.to_thread.run_sync(self.writer.append, record)


def combo_key(spec: EvalSpec, run_info: RunInfo, combo: Combo, problem: Problem, *, seed: int | None) -> Key:
    sid = settings_id(run_info.settings, combo.strategy.config.model_dump(mode="json"))
    return (spec.task.name, problem.id, combo.name, combo.n, sid, -1 if seed is None else seed)


def make_record(
    spec: EvalSpec,
    combo: Combo,
    problem: Problem,
    *,
    result: StrategyResult,
    grade: Grade,
    run_info: RunInfo,
    sampling: SamplingParams | None = None,
) -> EvalRecord:
    """One JSONL record: the problem, the raw result (traces included), the grade and the run's settings."""
    config = combo.strategy.config.model_dump(mode="json")
    return EvalRecord(
        run_id=run_info.run_id,
        settings_id=settings_id(run_info.settings, config),
        task=spec.task.name,
        grading_mode=spec.task.grading,
        problem=problem,
        strategy=combo.name,
        n=combo.n,
        strategy_config=config,
        result=result,
        grade=GradeRecord.model_validate(grade.as_dict()),
        backend=spec.backend.spec,
        sampling=sampling or spec.sampling.params,
        seed=spec.shuffle_seed,
        versions=run_info.versions,
        recorded_at=time.time(),
        prompt=None if run_info.prompt is None else run_info.prompt.ref(),
        model=(run_info.model or {}).get("name"),
    )


def failure_record(
    spec: EvalSpec,
    combo: Combo,
    problem: Problem,
    *,
    exc: Exception,
    run_info: RunInfo,
    sampling: SamplingParams | None = None,
) -> EvalRecord:
    """The record of a problem whose run raised: no answer, outcome "failed", the exception kept."""
    line = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    result = StrategyResult(
        strategy=combo.name, problem_id=problem.id, answer=None, stop_reason="error", error=line
    )
    grade = Grade("failed", None, problem.gold, line)
    failure = RunFailure(
        type=f"{type(exc).__module__}.{type(exc).__qualname__}",
        message=str(exc),
        traceback="".join(traceback.format_exception(exc))[-MAX_TRACEBACK_CHARS:],
    )
    record = make_record(
        spec, combo, problem, result=result, grade=grade, run_info=run_info, sampling=sampling
    )
    return record.model_copy(update={"failure": failure})


def sweep_complete(spec: EvalSpec, run_info: RunInfo) -> bool:
    """Whether every (seed, configuration) of this sweep has a record (a result or not) for every
    problem of the run, those of earlier invocations included (a resume over fewer problems does not
    clear the mark of a run whose other problems were cut short)."""
    recorded = {r.key for r in load_records(spec.folder.path).latest()}
    if run_info.shard is not None:  # a shard holds only the units it owns
        from evals.run.shards import shard_units

        owned = shard_units(run_info, run_info.shard.indices, run_info.shard.count)
        return all(key in recorded for key in owned)
    for sampling in spec.sampling.passes():
        seed = -1 if sampling.seed is None else sampling.seed
        for combo in spec.combos:
            sid = settings_id(run_info.settings, combo.strategy.config.model_dump(mode="json"))
            if any(
                (spec.task.name, pid, combo.name, combo.n, sid, seed) not in recorded
                for pid in run_info.problems
            ):
                return False
    return True


def ordered_records(spec: EvalSpec, run_info: RunInfo, records: Sequence[EvalRecord]) -> list[EvalRecord]:
    """Records of this sweep in input order: configuration by configuration, problem by problem."""
    by_key: dict[Key, EvalRecord] = {r.key: r for r in records}
    ordered = []
    for sampling in spec.sampling.passes():
        for combo in spec.combos:
            for problem in spec.problems:
                found = by_key.get(combo_key(spec, run_info, combo, problem, seed=sampling.seed))
                if found is not None:
                    ordered.append(found)
    return ordered


def backend_failures(records: Sequence[EvalRecord]) -> str | None:
    """A line saying how many records are not results (backend errors, runs that raised), or None."""
    errors = [r for r in records if r.grade.outcome == "error"]
    failed = [r for r in records if r.grade.outcome == "failed"]
    if not errors and not failed:
        return None
    parts = []
    if failed:
        parts.append(f"{len(failed)} failed: the run raised (first: {(failed[0].grade.cause or '')[:200]})")
    backend = [r for r in errors if is_backend_error(r)]
    for group, where in (
        (backend, "in the backend"),
        ([r for r in errors if not is_backend_error(r)], "in the strategy"),
    ):
        if group:
            parts.append(f"{len(group)} failed {where} (first: {(group[0].grade.cause or 'error')[:200]})")
    return (
        f"{len(errors) + len(failed)} of {len(records)} records are not results: {'; '.join(parts)}; "
        "--resume runs them again"
    )


def is_backend_error(record: EvalRecord) -> bool:
    """Whether an "error" record's cause is the backend's (paragen's Backend*Error), not the strategy's
    own (an LLMCompiler plan that does not parse ends its run in an error too)."""
    return (record.grade.cause or "backend error").startswith(("Backend", "backend error"))


def _progress(enabled: bool) -> Progress:
    return sweep_progress(enabled)
