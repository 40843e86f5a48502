"""RunContext: everything a strategy may do, and the one place all accounting happens.

Strategies never touch a backend or spawn tasks; they ask the context::

    trace = await ctx.sample(ctx.request(messages=...))          # one completion
    async with ctx.fanout(request, n=8) as fan:                  # n at once
        async for trace in fan:                                  # as each finishes
            if good(trace):
                await fan.cancel("first-finish")                 # stop the others
    return ctx.finish(answer, text=trace.text)

Every sample becomes a :class:`~paragen.types.Trace` in the run's ledger, with its
tokens counted up to the moment it ended, so accounting is identical for every
strategy. A sample whose backend fails becomes a trace with status "error"; its
siblings go on.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from paragen.accounting import summarize
from paragen.backends.base import Backend, Capabilities
from paragen.config import Budget
from paragen.errors import BudgetExceededError
from paragen.events import EventSink, Note, SampleEnded, SampleStarted
from paragen.live import LiveSample, Monitor
from paragen.types import ChatMessage, GenerateRequest, Problem, SamplingParams, StrategyResult, Trace

if TYPE_CHECKING:
    from paragen.fanout import Fanout
    from paragen.shared import SharedWorkers
    from paragen.strategy import Strategy


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


class RunContext:
    """Handed to ``Strategy.run``: sampling, fan-out, cancellation, events, budget and clock."""

    def __init__(
        self,
        backend: Backend,
        problem: Problem,
        *,
        defaults: SamplingParams | None = None,
        ledger: Ledger | None = None,
        strategy_name: str = "",
        label_prefix: str = "",
    ) -> None:
        self.backend = backend
        self.problem = problem
        self.defaults = defaults or SamplingParams()
        self.ledger = ledger or Ledger(Budget(), None)
        self.strategy_name = strategy_name
        self.label_prefix = label_prefix
        self.budget = BudgetView(self.ledger)
        self._own: list[Trace] = []

    # -- reading -------------------------------------------------------------------------------

    @property
    def capabilities(self) -> Capabilities:
        return self.backend.capabilities

    @property
    def clock(self) -> Clock:
        return self.ledger.clock

    @property
    def traces(self) -> list[Trace]:
        """The traces this context (and strategies it ran) produced so far."""
        return list(self._own)

    def now(self) -> float:
        return self.ledger.clock.now()

    # -- building requests -----------------------------------------------------------------------

    def request(
        self,
        *,
        prompt: str | None = None,
        messages: Sequence[ChatMessage | dict[str, str]] | None = None,
        n: int = 1,
        continue_final: bool = False,
        **params: Any,
    ) -> GenerateRequest:
        """A request with the run's default sampling parameters, overridden by ``params``."""
        sampling = self.defaults.model_copy(update=params) if params else self.defaults
        sampling = SamplingParams.model_validate(sampling.model_dump())
        msgs = None if messages is None else tuple(ChatMessage.model_validate(m) for m in messages)
        return GenerateRequest(
            prompt=prompt,
            messages=msgs,
            params=sampling,
            n=n,
            continue_final=continue_final,
            affinity=self.problem.id,
        )

    # -- sampling --------------------------------------------------------------------------------

    async def sample(
        self, request: GenerateRequest, *, label: str = "sample", parents: Sequence[int] = ()
    ) -> Trace:
        """One completion as a finished trace (status "error" if the backend failed)."""
        async with self.fanout(request, n=1, label=label, parents=parents) as fan:
            async for trace in fan:
                return trace
        raise AssertionError("a fan-out of one ended without its trace")

    def fanout(
        self,
        request: GenerateRequest | Sequence[GenerateRequest],
        *,
        n: int | None = None,
        label: str = "sample",
        parents: Sequence[int] = (),
        checkpoint: int | None = None,
        monitor: Monitor | None = None,
        kind: str = "sample",
    ) -> AbstractAsyncContextManager[Fanout]:
        """Run ``n`` samples of one request (or one sample of each request) at once.

        Iterating the fan-out yields each trace as it finishes; with ``checkpoint=k`` a
        running trace is also yielded once when it has ``k`` tokens (``trace.end`` is
        None then). ``monitor`` is called after every delta and may prune a sample.
        Leaving the block cancels whatever still runs (reason "abandoned").
        """
        from paragen.fanout import Fanout

        requests = _expand(request, n)
        return Fanout(self, requests, label, list(parents), checkpoint, monitor, kind)

    def shared_workers(
        self, num_workers: int, *, names: Sequence[str] = (), **params: Any
    ) -> AbstractAsyncContextManager[SharedWorkers]:
        """Hogwild! workers over one shared KV cache (``capabilities.shared_cache``); see paragen.shared."""
        from paragen.shared import open_shared_workers

        return open_shared_workers(self, num_workers, names, params)

    async def cancel(self, reason: str) -> None:
        """Stop every sample of the run that is still running, recording ``reason``."""
        for live in list(self.ledger.live.values()):
            await stop_sample(live, reason, "cancelled")

    def emit(self, message: str, **data: Any) -> None:
        """Send a strategy's own event (a decision worth seeing) to the run's listeners."""
        self._send(Note(problem_id=self.problem.id, t=self.now(), message=message, data=data))

    async def count_tokens(self, text: str) -> int:
        count, _ = await self.backend.count_tokens(text)
        return count

    # -- composition and results -----------------------------------------------------------------

    async def run_strategy(
        self, strategy: Strategy, problem: Problem | None = None, *, label: str | None = None
    ) -> StrategyResult:
        """Run another strategy inside this run: its samples share this run's ledger and budget."""
        child = RunContext(
            self.backend,
            problem or self.problem,
            defaults=self.defaults,
            ledger=self.ledger,
            strategy_name=strategy.name,
            label_prefix=f"{self.label_prefix}{label or strategy.name}/",
        )
        result = await strategy.run(child.problem, child)
        self._own.extend(child._own)
        return result

    def tool_span(self, label: str, **meta: Any) -> AbstractAsyncContextManager[Trace]:
        """Time a tool call as a node of the run (no tokens; its own start and end)."""
        from paragen.fanout import ToolSpan

        return ToolSpan(self, label, meta)

    def finish(
        self, answer: str | None, *, text: str | None = None, metrics: dict[str, float] | None = None
    ) -> StrategyResult:
        """The strategy's result with the common accounting of its traces."""
        traces = list(self._own)
        return StrategyResult(
            strategy=self.strategy_name,
            problem_id=self.problem.id,
            answer=answer,
            text=text,
            traces=traces,
            usage=summarize(traces, latency_s=self.now()),
            metrics=dict(metrics or {}),
        )

    # -- internals used by Fanout ----------------------------------------------------------------

    def new_trace(self, label: str, kind: str, parents: list[int]) -> Trace:
        trace = Trace(
            id=len(self.ledger.traces),
            label=f"{self.label_prefix}{label}",
            kind=kind,
            start=self.now(),
            parents=parents,
        )
        self.ledger.traces.append(trace)
        self._own.append(trace)
        if self.ledger.sink is not None:
            self._send(
                SampleStarted(problem_id=self.problem.id, trace_id=trace.id, label=trace.label, t=trace.start)
            )
        return trace

    def check_budget(self, request: GenerateRequest) -> GenerateRequest:
        """Refuse new work once the budget is spent; clip max_tokens to the sequential cap."""
        if self.ledger.budget_hit:
            raise BudgetExceededError("the run's token budget is used up", kind="total_tokens")
        cap = self.ledger.budget.max_sequential_tokens
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
        ledger = self.ledger
        ledger.total_tokens += tokens
        cap = ledger.budget.max_total_tokens
        if cap is not None and ledger.total_tokens >= cap:
            ledger.budget_hit = True
        return ledger.budget_hit

    def ended(self, trace: Trace) -> None:
        self.ledger.live.pop(trace.id, None)
        if self.ledger.sink is not None:
            self._send(SampleEnded(problem_id=self.problem.id, trace=trace))

    def _send(self, event: Any) -> None:
        sink = self.ledger.sink
        if sink is not None:
            sink(event)


async def stop_sample(live: LiveSample, reason: str, status: str) -> None:
    """Stop one running sample: cancel its own request, or abort its choice of a shared one."""
    if not live.is_running or live.stop_reason is not None:
        return
    live.request_stop(reason, status)  # type: ignore[arg-type]
    if live.scope is not None:
        live.scope.cancel()
    elif live.group is not None:
        await live.group.abort(live.index)
        if live.on_stop is not None:
            live.on_stop()


def _expand(request: GenerateRequest | Sequence[GenerateRequest], n: int | None) -> list[GenerateRequest]:
    if isinstance(request, GenerateRequest):
        count = request.n if n is None else n
        if count <= 0:
            raise ValueError(f"n must be positive, got {count}")
        return [request.model_copy(update={"n": count})]
    if n is not None:
        raise ValueError("give n only with a single request")
    return [r if r.n == 1 else r.model_copy(update={"n": 1}) for r in request]
