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
siblings go on. Other concurrent work (tool calls, a queue read while a fan-out runs,
sub-strategies side by side) goes through ``ctx.concurrently()``: the task group is the
context's, never the strategy's.

The modules build on each other in one direction: ``live`` -> ``ledger`` (the books, with
the backend, private to the core) -> ``fanout`` / ``children`` -> ``context`` ->
``strategy`` -> ``orchestrator``. ``run_strategy`` takes any :class:`Runnable`, so this
module needs nothing from ``strategy``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from paragen import tracing
from paragen._accounting import summarize
from paragen._children import ChildTasks
from paragen._fanout import Fanout, ToolSpan
from paragen._ledger import Account, BudgetView, Clock, Ledger
from paragen._live import LiveSample, Monitor, continuation, stop_sample
from paragen.backends.base import Backend, Capabilities
from paragen.config import Budget
from paragen.errors import ConfigError
from paragen.events import Note
from paragen.scoring.base import ScoreRequest, ScorerError, StepScores
from paragen.scoring.llm import check_logprobs, verdict_score, verify_messages
from paragen.scoring.pool import LLM_VERIFIER, Scorers
from paragen.types import ChatMessage, GenerateRequest, Problem, SamplingParams, StrategyResult, Trace

if TYPE_CHECKING:
    from paragen._shared import RunSharedSession

CONTINUATION_HINT = (
    "use the engine, vLLM, or the chat endpoint of a vLLM, SGLang or llama-server server "
    "(capabilities.continue_final)"
)


class Runnable(Protocol):
    """What ``run_strategy`` needs of a strategy (the Strategy protocol, which builds on this module)."""

    @property
    def name(self) -> str: ...

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult: ...


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
        scorers: Scorers | None = None,
        backends: Mapping[str, Backend] | None = None,
    ) -> None:
        self.problem = problem
        self.defaults = defaults or SamplingParams()
        self.strategy_name = strategy_name
        self._backend = backend
        self._scorers = scorers or Scorers()
        # Other models by name (a reader, a judge): ``sample(..., backend=name)`` files their calls
        # in this run's ledger, counted like its own samples.
        self._backends = dict(backends or {})
        self._ledger = ledger or Ledger(Budget(), None)
        self._account = Account(backend, self._ledger, problem.id, label_prefix)
        self.budget = BudgetView(self._ledger)

    # -- reading -------------------------------------------------------------------------------

    @property
    def capabilities(self) -> Capabilities:
        """What the backend can do (logprobs, native n, per-choice abort, ...); the backend stays private."""
        return self._backend.capabilities

    @property
    def label_prefix(self) -> str:
        return self._account.label_prefix

    @property
    def clock(self) -> Clock:
        return self._ledger.clock

    @property
    def traces(self) -> list[Trace]:
        """The traces this context (and strategies it ran) produced so far."""
        return list(self._account.traces)

    def now(self) -> float:
        return self._ledger.clock.now()

    # -- building requests -----------------------------------------------------------------------

    def request(
        self,
        *,
        prompt: str | None = None,
        messages: Sequence[ChatMessage | dict[str, str]] | None = None,
        n: int = 1,
        continue_final: bool = False,
        thinking_budget: int | None = None,
        **params: Any,
    ) -> GenerateRequest:
        """A request with the run's default sampling parameters, overridden by ``params``;
        ``thinking_budget`` asks the server to end the thinking there (``capabilities.thinking_budget``)."""
        # The run's defaults are validated already; only overrides need validating again.
        sampling = self.defaults
        if params:
            sampling = SamplingParams.model_validate({**sampling.model_dump(), **params})
        msgs = None if messages is None else tuple(ChatMessage.model_validate(m) for m in messages)
        return GenerateRequest(
            prompt=prompt,
            messages=msgs,
            params=sampling,
            n=n,
            continue_final=continue_final,
            thinking_budget=thinking_budget,
            # The problem, not its id alone: problems built without one all share the default id,
            # and a pool would pin all of them to one replica.
            affinity=f"{self.problem.id}\n{self.problem.question}",
        )

    # -- sampling --------------------------------------------------------------------------------

    async def sample(
        self,
        request: GenerateRequest,
        *,
        label: str = "sample",
        parents: Sequence[int] = (),
        backend: str | None = None,
    ) -> Trace:
        """One completion as a finished trace (status "error" if the backend failed); ``backend``
        names another model given to the Orchestrator (None: the run's own)."""
        account = self._account_on(backend)
        fan = Fanout(account, _expand(request, 1), label=label, kind="sample", parents=parents)
        return await fan.one()

    def backend_capabilities(self, backend: str | None) -> Capabilities:
        """What a named backend (None: the run's own) can do."""
        return self._account_on(backend).backend.capabilities

    def _account_on(self, backend: str | None) -> Account:
        if backend is None:
            return self._account
        found = self._backends.get(backend)
        if found is None:
            raise ConfigError(
                f"no backend named {backend!r} was given to this run",
                hint=f"Orchestrator(backend, backends={{{backend!r}: other_backend}})",
            )
        return self._account.on(found)

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
        share_prefix: bool = False,
        backend: str | None = None,
    ) -> AbstractAsyncContextManager[Fanout]:
        """Run ``n`` samples of one request (or one sample of each request) at once.

        Iterating the fan-out yields each trace as it finishes; with ``checkpoint=k`` a
        running trace is also yielded once when it has ``k`` tokens (``trace.end`` is
        None then). ``monitor`` is called after every delta and may prune a sample.
        Leaving the block cancels whatever still runs (reason "abandoned"). ``backend`` names
        another model given to the Orchestrator (None: the run's own).

        ``share_prefix``: the requests' prompts share a long prefix (children of one trunk). A
        backend that can fork (the engine) prefills the first and starts the others from its cache
        where their tokens agree; a server with prefix caching shares it on its own.
        """
        requests = _expand(request, n)
        account = self._account_on(backend)
        siblings = getattr(account.backend, "siblings", None) if share_prefix else None
        opener = siblings() if siblings is not None and account.backend.capabilities.fork else None
        return Fanout(
            account,
            requests,
            label=label,
            kind=kind,
            parents=parents,
            checkpoint=checkpoint,
            monitor=monitor,
            opener=opener,
        )

    def require_continuation(self, why: str, *, instead: str | None = None) -> None:
        """Refuse, before any sample, a backend that cannot continue a prefilled reply
        (``capabilities.continue_final``): a ConfigError saying ``why``, its hint the backends that
        can (and ``instead``, another way out, when given)."""
        if not self.capabilities.continue_final:
            raise ConfigError(why, hint=CONTINUATION_HINT + (f", or {instead}" if instead else ""))

    def concurrently(self) -> ChildTasks:
        """A block whose children (coroutines, tool calls, child strategies) run at once.

        ``async with ctx.concurrently() as children: children.start(fn, *args)``; leaving the
        block waits for them all. The task group is the core's: strategies never make their own.
        """
        return ChildTasks()

    def shared_session(
        self, num_workers: int, *, names: Sequence[str] = (), **params: Any
    ) -> AbstractAsyncContextManager[RunSharedSession]:
        """Hogwild! workers over one shared KV cache (``capabilities.shared_cache``); see paragen._shared."""
        from paragen._shared import open_shared_session

        return open_shared_session(self._account, self.defaults, num_workers, names, params)

    def emit_worker_text(self, trace_id: int, worker: int, name: str, text: str) -> None:
        """Send new text of one of several cooperating workers (a WorkerText event) to the listeners."""
        from paragen._shared import emit_worker_text

        emit_worker_text(self._account, trace_id, worker, name, text)

    async def probe(
        self, live: LiveSample, text: str, *, max_tokens: int, label: str = "probe", **params: Any
    ) -> Trace:
        """Ask a running sample for its answer so far: its text, then ``text``, continued for at
        most ``max_tokens`` (sampled as the sample was, unless ``params`` say otherwise). Call it
        from an (async) monitor: the sample waits for the probe. The probe is a trace of its own
        (kind "probe", the sample its parent), counted as ``probe_tokens``; the sample is unchanged.

        A backend that can fork a live sample (``capabilities.fork``: the engine) runs the probe
        from the sample's KV cache: its blocks shared, only ``text`` prefilled, the fork freed after.
        Elsewhere the probe is a continuation of a prefilled reply (``capabilities.continue_final``):
        a server with prefix caching (vLLM, SGLang) serves the sample's prefix from its cache.
        """
        request = continuation(live, text, max_tokens=max_tokens, **params)
        fork = getattr(self._backend, "fork", None)
        if self.capabilities.fork and fork is not None and live.stream is not None:
            opener = functools.partial(fork, live.stream, live.index, live.num_tokens, text)
            probe = Fanout(
                self._account, [request], label=label, kind="probe", parents=[live.trace.id], opener=opener
            )
            return await probe.one()
        if request.continue_final:
            self.require_continuation(
                "probing a chat sample needs a backend that continues a prefilled reply"
            )
        fan = Fanout(self._account, [request], label=label, kind="probe", parents=[live.trace.id])
        return await fan.one()

    async def score(
        self,
        steps: Sequence[str],
        *,
        verifier: str = LLM_VERIFIER,
        question: str | None = None,
        whole: bool = False,
        parents: Sequence[int] = (),
        label: str = "score",
    ) -> StepScores:
        """A verifier's scores of a solution's ``steps`` (the last is the newest) for ``question``
        (default: the problem's). A process reward model rates every step, an outcome reward model
        the whole; ``verifier="llm"`` asks the run's own backend whether the last step (or, with
        ``whole``, the whole solution) is correct. Any other ``verifier`` is a scorer spec
        (``engine:PATH``, ``vllm:PATH``, ``vllm-server:URL``) opened once by the run's Scorers, or
        the name of a Scorer given to the Orchestrator.

        Each call is a trace of kind "score" (``parents``: the samples it rated), its tokens in
        ``usage.score_tokens``, never in ``total_tokens``; cancelling the run cancels it. A
        scorer that fails raises ScorerError (the run ends as a backend failure).
        """
        request = ScoreRequest(
            question=self.problem.question if question is None else question, steps=tuple(steps)
        )
        if verifier == LLM_VERIFIER:
            return await self._verify(request, whole, parents, label)
        scorer = await self._scorers.get(verifier)
        async with ToolSpan(
            self._account, label, {"verifier": verifier}, kind="score", parents=parents
        ) as trace:
            scores = await scorer.score(request)
            trace.prompt_tokens, trace.completion_tokens = scores.prompt_tokens, scores.completion_tokens
            trace.count_source = scores.count_source
            trace.meta["scores"] = list(scores.steps)
        return scores

    async def _verify(
        self, request: ScoreRequest, whole: bool, parents: Sequence[int], label: str
    ) -> StepScores:
        check_logprobs(self.capabilities)
        messages = verify_messages(request.question, request.steps, whole=whole)
        # One greedy token: its log-probability is the verdict (see paragen.scoring.llm).
        ask = self.request(messages=messages, max_tokens=1, temperature=0.0, logprobs=True, stop=())
        fan = Fanout(self._account, [ask], label=label, kind="score", parents=parents)
        trace = await fan.one()
        if trace.status == "error":
            raise ScorerError(f"the LLM-as-verifier's call failed: {trace.error}")
        score = verdict_score(trace)
        trace.meta.update(verifier=LLM_VERIFIER, scores=[score])
        return StepScores(
            steps=(score,),
            prompt_tokens=trace.prompt_tokens,
            completion_tokens=trace.completion_tokens,
            count_source=trace.count_source,
        )

    async def conclude(self, live: LiveSample, reason: str) -> None:
        """Stop a running sample whose answer is already known (a probe settled it): its trace ends
        with status "ok" and ``cancel_reason`` = ``reason``; its tokens are not wasted ones."""
        await stop_sample(live, reason, "ok")

    async def cancel(self, reason: str) -> None:
        """Stop every sample of the run that is still running, recording ``reason``."""
        await self._ledger.cancel_all(reason)

    def emit(self, message: str, **data: Any) -> None:
        """Send a strategy's own event (a decision worth seeing) to the run's listeners."""
        self._send(Note(problem_id=self.problem.id, t=self.now(), message=message, data=data))

    async def count_tokens(self, text: str) -> int:
        count, _ = await self._backend.count_tokens(text)
        return count

    # -- composition and results -----------------------------------------------------------------

    async def run_strategy(
        self, strategy: Runnable, problem: Problem | None = None, *, label: str | None = None
    ) -> StrategyResult:
        """Run another strategy inside this run: its samples share this run's ledger and budget."""
        child = RunContext(
            self._backend,
            problem or self.problem,
            defaults=self.defaults,
            ledger=self._ledger,
            strategy_name=strategy.name,
            label_prefix=f"{self.label_prefix}{label or strategy.name}/",
            scorers=self._scorers,
            backends=self._backends,
        )
        result = await strategy.run(child.problem, child)
        self._account.traces.extend(child._account.traces)
        return result

    async def run_strategies(
        self, strategy: Runnable, problems: Sequence[Problem], *, label: str
    ) -> list[StrategyResult]:
        """Run ``strategy`` on every problem at once (labelled ``{label}0``, ...); results in input order."""
        results: list[StrategyResult | None] = [None] * len(problems)

        async def one(index: int) -> None:
            results[index] = await self.run_strategy(strategy, problems[index], label=f"{label}{index}")

        async with self.concurrently() as children:
            for index in range(len(problems)):
                children.start(one, index)
        return [r for r in results if r is not None]

    def phase(self, name: str, **attributes: Any) -> AbstractContextManager[Any]:
        """A block that is one phase of the run (a round, a step): with tracing on, a span whose
        children are the samples started in it; off, nothing (``with ctx.phase("round", round=r):``)."""
        return tracing.phase(name, attributes)

    def tool_span(self, label: str, **meta: Any) -> AbstractAsyncContextManager[Trace]:
        """Time a tool call as a node of the run (no tokens; its own start and end)."""
        return ToolSpan(self._account, label, meta)

    def finish(
        self,
        answer: str | None,
        *,
        text: str | None = None,
        reasoning: str | None = None,
        metrics: dict[str, float] | None = None,
    ) -> StrategyResult:
        """The strategy's result with the common accounting of its traces; ``reasoning`` is the
        thinking of the sample whose answer text is ``text``."""
        traces = list(self._account.traces)
        return StrategyResult(
            strategy=self.strategy_name,
            problem_id=self.problem.id,
            answer=answer,
            text=text,
            reasoning=reasoning or None,
            traces=traces,
            usage=summarize(traces, latency_s=self.now()),
            metrics=dict(metrics or {}),
        )

    def _send(self, event: Any) -> None:
        self._ledger.send(event)


def _expand(request: GenerateRequest | Sequence[GenerateRequest], n: int | None) -> list[GenerateRequest]:
    if isinstance(request, GenerateRequest):
        count = request.n if n is None else n
        if count <= 0:
            raise ValueError(f"n must be positive, got {count}")
        return [request if request.n == count else request.model_copy(update={"n": count})]
    if n is not None:
        raise ValueError("give n only with a single request")
    return [r if r.n == 1 else r.model_copy(update={"n": 1}) for r in request]
