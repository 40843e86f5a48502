"""The orchestrator: runs a strategy on one problem, or on many concurrently under a limit.

It owns the task groups, the deadline and the budget of each run, and turns what
goes wrong inside a strategy into a recorded result, with the traces so far and their
accounting: a spent budget ends the run as ``stop_reason="budget"``, a passed deadline
as ``"deadline"``, a backend failure that escapes the strategy as ``"error"``, also when
they come wrapped in exception groups (a strategy's task groups wrap what leaves them) at
any depth; :mod:`paragen._outcome` is the one place that decides. Only cancellation from
outside and programmer errors (bugs) propagate, a bug as itself, never as a group, and
a bug wins over a budget or backend error in the same group.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio

from paragen import tracing
from paragen._accounting import summarize
from paragen._context import RunContext
from paragen._ledger import Ledger
from paragen._outcome import StopReason, classify, leaves
from paragen.backends.base import Backend, open_backend
from paragen.config import Budget
from paragen.errors import ConfigError
from paragen.events import EventSink, RunEnded
from paragen.scoring.llm import check_logprobs
from paragen.scoring.pool import LLM_VERIFIER, Scorers
from paragen.strategy import Strategy, build_strategy
from paragen.types import Problem, SamplingParams, StrategyResult

# What run() and the many-problem methods take: a strategy object or a registered name; a Problem or a
# question's text.
StrategyLike = Strategy | str
ProblemLike = Problem | str

if TYPE_CHECKING:
    from paragen.metrics import Metrics


def check_reader(strategy: Strategy, names: Collection[str], *, hint: str | None = None) -> None:
    """Refuse ``strategy`` when its config's ``reader`` names a backend not among ``names``; ``hint``
    says how the caller gives one (default: the Python API's way)."""
    reader = getattr(strategy.config, "reader", None)
    if isinstance(reader, str) and reader not in names:
        raise ConfigError(
            f"strategy {strategy.name!r} reads with backend {reader!r}, which was not given",
            hint=hint or f"Orchestrator(backend, backends={{{reader!r}: other_backend}}), or reader=None",
        )


class Orchestrator:
    """Runs strategies over one backend with shared defaults, budget and concurrency limit."""

    def __init__(
        self,
        backend: Backend,
        *,
        defaults: SamplingParams | None = None,
        budget: Budget | None = None,
        max_concurrent_problems: int = 8,
        on_event: EventSink | None = None,
        scorers: Scorers | None = None,
        metrics: Metrics | None = None,
        backends: Mapping[str, Backend] | None = None,
    ) -> None:
        if max_concurrent_problems <= 0:
            raise ConfigError(f"max_concurrent_problems must be positive, got {max_concurrent_problems}")
        _check_metrics(metrics)
        self.backend = backend
        self.defaults = defaults or SamplingParams()
        self.budget = budget or Budget()
        self.limit = max_concurrent_problems
        self.on_event = on_event
        # Prometheus counters of every run (paragen.metrics); None: nothing counted, nothing imported.
        self.metrics = metrics
        # The verifiers strategies score with (reward models are loaded once, not per run); a pool
        # given here is the caller's to close, one made here closes with aclose().
        self.scorers = scorers or Scorers()
        self._owns_scorers = scorers is None
        # Other models a strategy may sample from by name (``reader="judge"``: a second model reads
        # the samples); the caller's to close, like ``backend``. Their calls are the run's traces.
        self.backends = dict(backends or {})
        self._opened = False

    async def __aenter__(self) -> Orchestrator:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the scorers this orchestrator opened (the backend is the caller's)."""
        if self._owns_scorers:
            await self.scorers.aclose()

    async def open_verifiers(self, strategy: Strategy) -> None:
        """Open the reward models ``strategy``'s config names (``verifier``), as a backend is opened:
        a wrong path or URL fails here, once, before any sample."""
        check_reader(strategy, self.backends)
        spec = getattr(strategy.config, "verifier", None)
        if spec == LLM_VERIFIER:
            # Refused before any sample: found at the first score, it would cost every problem its samples.
            check_logprobs(self.backend.capabilities)
        elif isinstance(spec, str):
            await self.scorers.get(spec)

    async def open(self) -> None:
        """Open the backend once, before any strategy reads its capabilities (run() and
        stream_many() call it): an HTTP backend probes its servers here, and a wrong URL
        fails here as one error instead of once per sample."""
        if not self._opened:
            await open_backend(self.backend)
            for other in self.backends.values():
                await open_backend(other)
            self._opened = True

    async def run(self, strategy: StrategyLike, problem: ProblemLike) -> StrategyResult:
        """Run ``strategy`` on ``problem``: a result, unless cancelled from outside or the strategy has a bug.

        ``strategy`` is a Strategy or a registered name (built with its default config); ``problem`` a
        Problem or a question's text. Anything else is a ConfigError saying what is taken.
        A bug (anything but a spent budget, a passed deadline or a backend failure) is raised as
        itself, unwrapped from the exception groups it crossed, with its own traceback.
        """
        strategy, problem = as_strategy(strategy), as_problem(problem)
        await self.open()
        await self.open_verifiers(strategy)
        if self.metrics is None:
            return await self._run(strategy, problem, self.on_event)
        return await self._run_counted(strategy, problem, self.metrics)

    async def _run_counted(self, strategy: Strategy, problem: Problem, metrics: Metrics) -> StrategyResult:
        """``_run`` with its samples and outcome counted in ``metrics``."""
        observer, on_event = metrics.observer(), self.on_event

        def sink(event: Any) -> None:
            observer(event)
            if on_event is not None:
                on_event(event)

        metrics.runs_running += 1
        try:
            result = await self._run(strategy, problem, sink)
        except BaseException as exc:  # counted, then raised as it came
            metrics.run_stopped(strategy.name, "cancelled" if _is_cancellation(exc) else "failed")
            raise
        finally:
            metrics.runs_running -= 1
            observer.close()
        metrics.run_ended(result)
        return result

    async def _run(self, strategy: Strategy, problem: Problem, on_event: EventSink | None) -> StrategyResult:
        tracer = tracing.tracer()
        if tracer is None:
            return await self._run_once(strategy, problem, on_event)
        with tracer.run(strategy.name, problem.id) as span:  # the root of the run's spans
            result = await self._run_once(strategy, problem, on_event)
            span.ended(result)
            return result

    async def _run_once(
        self, strategy: Strategy, problem: Problem, on_event: EventSink | None
    ) -> StrategyResult:
        ledger = Ledger(self.budget, on_event)
        ctx = RunContext(
            self.backend,
            problem,
            defaults=self.defaults,
            ledger=ledger,
            strategy_name=strategy.name,
            scorers=self.scorers,
            backends=self.backends,
        )
        result, stop_reason, error = await self._execute(strategy, problem, ctx)
        if ledger.budget_hit and stop_reason == "done" and result is None:
            stop_reason = "budget"
        result = self._complete(result, ctx, ledger=ledger, stop_reason=stop_reason, error=error)
        result.config = strategy.config.model_dump(mode="json")
        if on_event is not None:
            on_event(RunEnded(result=result))
        return result

    async def _execute(
        self, strategy: Strategy, problem: Problem, ctx: RunContext
    ) -> tuple[StrategyResult | None, StopReason, str | None]:
        """The strategy's result, or None and why the run ended; see paragen._outcome."""
        deadline = self.budget.deadline_s
        failure: BaseException | None = None
        result: StrategyResult | None = None
        try:
            with anyio.move_on_after(math.inf if deadline is None else deadline) as scope:
                try:
                    result = await strategy.run(problem, ctx)
                except Exception as exc:  # classified below, out of this handler: a bug re-raised as itself
                    failure = exc
        except BaseExceptionGroup as group:  # errors beside the cancellations of our own deadline
            if not scope.cancel_called:
                raise  # a cancellation from outside is in it: not this run's to keep
            failure = group
        if failure is not None:
            stop_reason, error = classify(failure)
            return None, "deadline" if scope.cancelled_caught else stop_reason, error
        return result, "deadline" if scope.cancelled_caught else "done", None

    def _complete(
        self,
        result: StrategyResult | None,
        ctx: RunContext,
        *,
        ledger: Ledger,
        stop_reason: StopReason,
        error: str | None,
    ) -> StrategyResult:
        latency = ctx.now()
        traces = ledger.traces
        tracer = tracing.tracer()
        for trace in traces:  # a deadline may have cut samples off mid-way
            if trace.end is None:
                trace.end, trace.status, trace.cancel_reason = latency, "cancelled", stop_reason
                if tracer is not None:
                    tracer.trace_ended(trace)
        if result is None:  # no result of the strategy's own: an empty one, its ending filled in below
            result = ctx.finish(None)
        elif stop_reason == "done":  # the strategy's own verdict stands unless the budget cut it short
            # A strategy that reports "error" after the budget stopped its samples failed for want of them.
            spent = ledger.budget_hit and result.stop_reason in ("done", "error")
            stop_reason = "budget" if spent else result.stop_reason
        return result.model_copy(
            update={
                "traces": list(traces),
                "usage": summarize(traces, latency_s=latency),
                "stop_reason": stop_reason,
                "error": error or result.error,
            }
        )

    async def run_many(self, strategy: StrategyLike, problems: Sequence[ProblemLike]) -> list[StrategyResult]:
        """Run ``strategy`` on every problem, at most ``limit`` at once; results in input order."""
        results: list[StrategyResult | None] = [None] * len(problems)
        async with self.stream_many(strategy, problems) as finished:
            async for index, result in finished:
                results[index] = result
        return [r for r in results if r is not None]

    @asynccontextmanager
    async def stream_many(
        self, strategy: StrategyLike, problems: Sequence[ProblemLike]
    ) -> AsyncIterator[AsyncIterator[tuple[int, StrategyResult]]]:
        """Yield (input index, result) pairs as problems finish, at most ``limit`` running at once.

        A run that raises (a bug) ends them all with its exception, as itself (not in a group);
        ``stream_outcomes`` contains it instead.
        """
        bug: BaseException | None = None
        try:
            async with self.stream_outcomes(strategy, problems) as outcomes:
                yield _raising(outcomes)
        except ExceptionGroup as group:  # the task group's wrapping of the one exception raised
            found = leaves(group)
            if len(found) != 1:
                raise
            bug = found[0]
        if bug is not None:
            raise bug  # out of the handler: its context stays its own

    @asynccontextmanager
    async def stream_outcomes(
        self, strategy: StrategyLike, problems: Sequence[ProblemLike]
    ) -> AsyncIterator[AsyncIterator[tuple[int, StrategyResult | Exception]]]:
        """Like ``stream_many``, but a run that raised yields its exception and the others go on.

        What a harness needs: one problem's bug is that problem's record, never the sweep's end.
        Cancellation (and KeyboardInterrupt) still ends them all.
        """
        strategy = as_strategy(strategy)
        given = [as_problem(p) for p in problems]
        await self.open()
        await self.open_verifiers(strategy)
        send, recv = anyio.create_memory_object_stream[tuple[int, StrategyResult | Exception]](math.inf)
        limiter = anyio.CapacityLimiter(self.limit)

        async def one(index: int, problem: Problem) -> None:
            outcome: StrategyResult | Exception
            async with limiter:
                try:
                    outcome = await self.run(strategy, problem)
                except Exception as exc:  # this problem's bug, already unwrapped by run()
                    outcome = exc
            send.send_nowait((index, outcome))

        async def all_problems() -> None:
            async with send, anyio.create_task_group() as tg:
                for index, problem in enumerate(given):
                    tg.start_soon(one, index, problem)

        async with anyio.create_task_group() as tg:
            tg.start_soon(all_problems)
            async with recv:
                yield recv
            tg.cancel_scope.cancel()


def _is_cancellation(exc: BaseException) -> bool:
    cancelled = anyio.get_cancelled_exc_class()
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(cancelled) is not None
    return isinstance(exc, cancelled)


async def _raising(
    outcomes: AsyncIterator[tuple[int, StrategyResult | Exception]],
) -> AsyncIterator[tuple[int, StrategyResult]]:
    async for index, outcome in outcomes:
        if isinstance(outcome, Exception):
            raise outcome
        yield index, outcome


def as_strategy(strategy: object) -> Strategy:
    """A Strategy as given, or the registered strategy of that name with its default config."""
    if isinstance(strategy, str):
        return build_strategy(strategy)
    if isinstance(strategy, Strategy):
        return strategy
    raise ConfigError(
        f"expected a Strategy or a registered strategy name, got {type(strategy).__name__}",
        hint="e.g. Orchestrator.run('majority', problem) or Orchestrator.run(Majority(n=8), problem)",
    )


def as_problem(problem: object) -> Problem:
    """A Problem as given, or one whose question is the text given."""
    if isinstance(problem, str):
        if not problem.strip():
            raise ConfigError("the question is empty")
        return Problem(question=problem)
    if isinstance(problem, Problem):
        return problem
    raise ConfigError(
        f"expected a Problem or a question's text, got {type(problem).__name__}",
        hint="e.g. Orchestrator.run(strategy, 'What is 7 + 5?') or Problem(id='q1', question=...)",
    )


def _check_metrics(metrics: object) -> None:
    """Refuse anything but a Metrics (or None) at construction, not as an AttributeError mid-run.

    paragen.metrics needs prometheus_client, so it is imported only when something was passed."""
    if metrics is None:
        return
    from paragen.metrics import Metrics

    if not isinstance(metrics, Metrics):
        raise ConfigError(
            f"metrics must be a paragen.metrics.Metrics or None, got {type(metrics).__name__}",
            hint="Orchestrator(backend, metrics=paragen.metrics.Metrics())",
        )
