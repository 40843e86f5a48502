"""The books of a run, private to the core: its clock, traces, live samples, token count and budget.

A :class:`Ledger` is shared by a run and the sub-runs of composed strategies. An
:class:`Account` is one context's window on it (its label prefix, its problem, the traces
it produced, the backend it samples from); the fan-out and tool spans write through an
account. Strategies see neither: they read the budget through :class:`BudgetView` and
the clock through ``ctx.now()``.
"""

from __future__ import annotations

import time
from typing import Any

from paragen import tracing
from paragen._live import LiveSample, stop_samples
from paragen.backends.base import Backend
from paragen.config import Budget
from paragen.errors import BudgetExceededError
from paragen.events import EventSink, SampleEnded, SampleStarted
from paragen.types import GenerateRequest, Trace


class Clock:
    """The run's monotonic clock: seconds since the run started."""

    __slots__ = ("_origin",)

    def __init__(self) -> None:
        self._origin = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self._origin


class Ledger:
    """State shared by a run and the sub-runs of composed strategies."""

    def __init__(self, budget: Budget, sink: EventSink | None) -> None:
        self.budget = budget
        self.sink = sink
        self.clock = Clock()
        self.traces: list[Trace] = []
        self.live: dict[int, LiveSample] = {}
        self.total_tokens = 0
        self.budget_hit = False

    def check_budget(self, request: GenerateRequest) -> GenerateRequest:
        """Refuse new work once the budget is spent; clip max_tokens to the sequential cap."""
        if self.budget_hit:
            raise BudgetExceededError("the run's token budget is used up", kind="total_tokens")
        cap = self.budget.max_sequential_tokens
        if cap is not None and request.params.max_tokens > cap:
            return request.model_copy(
                update={"params": request.params.model_copy(update={"max_tokens": cap})}
            )
        return request

    def charge(self, tokens: int) -> bool:
        """Count generated tokens; True once the total budget is spent (the caller then stops the run).

        It stays True after the first time, so a sample that still delivers a token stops the run
        even when the budget was crossed by a count that arrived where nobody could act on it.
        """
        self.total_tokens += tokens
        cap = self.budget.max_total_tokens
        if cap is not None and self.total_tokens >= cap:
            self.budget_hit = True
        return self.budget_hit

    async def cancel_all(self, reason: str) -> None:
        """Stop every sample of the run that is still running, recording ``reason``: all at once
        (``stop_samples``), so the cancel costs one abort's wait however many samples it stops."""
        await stop_samples(list(self.live.values()), reason, "cancelled")

    def send(self, event: Any) -> None:
        if self.sink is not None:
            self.sink(event)


class Account:
    """One context's window on the ledger: where its traces are filed and what they are called."""

    __slots__ = ("backend", "label_prefix", "ledger", "problem_id", "traces")

    def __init__(self, backend: Backend, ledger: Ledger, problem_id: str, label_prefix: str) -> None:
        self.backend = backend
        self.ledger = ledger
        self.problem_id = problem_id
        self.label_prefix = label_prefix
        self.traces: list[Trace] = []

    def now(self) -> float:
        return self.ledger.clock.now()

    def on(self, backend: Backend) -> Account:
        """This account sampling from another backend: the same books, label prefix and list of
        traces, so a second model's calls (a reader, a judge) are filed and counted with the run's."""
        other = Account(backend, self.ledger, self.problem_id, self.label_prefix)
        other.traces = self.traces
        return other

    def new_trace(self, label: str, kind: str, parents: list[int]) -> Trace:
        ledger = self.ledger
        trace = Trace(
            id=len(ledger.traces),
            label=f"{self.label_prefix}{label}",
            kind=kind,
            start=self.now(),
            parents=parents,
        )
        ledger.traces.append(trace)
        self.traces.append(trace)
        tracer = tracing.tracer()
        if tracer is not None:
            tracer.trace_started(trace)
        if ledger.sink is not None:
            ledger.sink(
                SampleStarted(problem_id=self.problem_id, trace_id=trace.id, label=trace.label, t=trace.start)
            )
        return trace

    def ended(self, trace: Trace) -> None:
        ledger = self.ledger
        ledger.live.pop(trace.id, None)
        tracer = tracing.tracer()
        if tracer is not None:
            tracer.trace_ended(trace)
        if ledger.sink is not None:
            ledger.sink(SampleEnded(problem_id=self.problem_id, trace=trace))


class BudgetView:
    """What a strategy may read of the run's budget."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger

    @property
    def max_total_tokens(self) -> int | None:
        return self._ledger.budget.max_total_tokens

    @property
    def max_sequential_tokens(self) -> int | None:
        return self._ledger.budget.max_sequential_tokens

    @property
    def used_total_tokens(self) -> int:
        return self._ledger.total_tokens

    @property
    def remaining_total_tokens(self) -> int | None:
        cap = self._ledger.budget.max_total_tokens
        return None if cap is None else max(0, cap - self._ledger.total_tokens)

    @property
    def deadline_s(self) -> float | None:
        return self._ledger.budget.deadline_s

    @property
    def remaining_s(self) -> float | None:
        deadline = self._ledger.budget.deadline_s
        return None if deadline is None else max(0.0, deadline - self._ledger.clock.now())
