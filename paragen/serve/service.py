"""The server's state and runs: one backend shared by every request, limits, live counters.

Each request is one Orchestrator run (or one per OpenAI choice) over the one backend,
so concurrent clients share it: the engine batches their samples in the same steps.
Cancelling the task that awaits a run (the client went away) cancels every sample of
it; the counters come back down only once the backend has let go of them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import anyio

from paragen.backends.base import Backend
from paragen.errors import BackendError, ParagenError
from paragen.events import SampleEnded
from paragen.metrics import Metrics
from paragen.orchestrator import Orchestrator, check_reader
from paragen.scoring.pool import Scorers
from paragen.serve.config import ServeConfig
from paragen.serve.errors import APIError, from_paragen, rate_limited, strategy_failed
from paragen.serve.routing import Plan, Router
from paragen.types import StrategyResult, TextSink

log = logging.getLogger("paragen.serve")

EventHandler = Callable[[int, Any], None]
"""Receives (choice index, event) for every event of a run."""
TextHandler = Callable[[int, str], None]
"""Receives (choice index, new text) as a pass-through sample streams."""


class Stats:
    """Counters shown on /health: what runs now, and what has been served (samples in flight are
    the metrics' count, kept by each run's Orchestrator)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self.runs_running = 0  # admitted: what the --max-runs limit counts
        self.runs_total = 0  # finished runs, cancelled ones included
        self.runs_cancelled_total = 0  # runs cancelled because their client went away
        self.prompt_tokens_total = 0
        self.completion_tokens_total = 0
        self.rejected_total = 0

    @property
    def samples_running(self) -> int:
        return self._metrics.samples_running

    def as_dict(self) -> dict[str, int]:
        counts = {k: v for k, v in vars(self).items() if not k.startswith("_")}
        return {"runs_running": self.runs_running, "samples_running": self.samples_running, **counts}


class Service:
    """Runs resolved requests on the backend, within the server's limits."""

    def __init__(
        self, backend: Backend, config: ServeConfig, *, backends: Mapping[str, Backend] | None = None
    ) -> None:
        self.backend = backend
        # Second models by name (--named-backend): a request's strategy reads with one (reader=NAME).
        self.backends = dict(backends or {})
        self.config = config
        self.router = Router(config.model_names, config.defaults, config.budget, config.tool_vote)
        self.metrics = Metrics()
        self.metrics.watch(backend)
        self.stats = Stats(self.metrics)
        # Reward models that served strategies name are loaded on first use and kept for the server's
        # life; only those the operator listed: a client must not pick a path or URL to load.
        self.scorers = Scorers(allowed=config.scorers)

    @contextmanager
    def admit(self, plan: Plan) -> Iterator[None]:
        """Count the plan's runs as running for the block: 400 past what one request may ask for,
        429 while the server runs as many as it allows."""
        config, stats = self.config, self.stats
        asked = plan.samples * plan.choices
        if asked > config.max_samples_per_request:
            stats.rejected_total += 1
            self.metrics.rejected("max_samples")
            # It can never be served, so not a 429 (a client would retry it): a 400.
            raise APIError(
                400,
                f"the request asks for {asked} samples; this server allows at most "
                f"{config.max_samples_per_request} per request (lower n)",
                param="n",
                code="too_many_samples",
            )
        if stats.runs_running + plan.choices > config.max_runs:
            stats.rejected_total += 1
            self.metrics.rejected("max_runs")
            raise rate_limited(
                f"the server is running {stats.runs_running} of at most {config.max_runs} runs; retry later",
                config.retry_after_s,
            )
        stats.runs_running += plan.choices
        try:
            yield
        finally:
            stats.runs_running -= plan.choices

    def check_tools(self, plan: Plan) -> None:
        """400 when the request has tools and the backend cannot take them."""
        if plan.tools is not None and not self.backend.capabilities.tools:
            raise APIError(
                400,
                f"the {self.backend.name} backend does not take tools (function calling); serve an "
                "OpenAI-compatible server that does (--backend openai:URL)",
                param="tools",
                code="unsupported_parameter",
            )

    async def check_prompt(self, plan: Plan) -> None:
        """400 when the prompt has more tokens than the server takes."""
        limit, text = self.config.max_prompt_tokens, plan.prompt_text
        if len(text.encode("utf-8")) <= limit:  # a token covers at least one byte: no count needed
            return
        count, how = await self.backend.count_tokens(text)
        if count > limit:
            raise APIError(
                400,
                f"the prompt has {count} tokens (counted by {how}); this server takes at most {limit}",
                param="messages" if plan.messages is not None else "prompt",
                code="context_length_exceeded",
            )

    async def run_all(
        self,
        plan: Plan,
        on_event: EventHandler | None = None,
        on_text: TextHandler | None = None,
        on_reasoning: TextHandler | None = None,
    ) -> list[StrategyResult]:
        """Every choice's result, in order; an APIError if the request turns out to be bad."""
        if plan.choices == 1:
            return [await self.run(plan, 0, on_event, on_text, on_reasoning)]
        results: list[StrategyResult | None] = [None] * plan.choices
        errors: list[APIError] = []

        async def one(index: int) -> None:
            try:
                results[index] = await self.run(plan, index, on_event, on_text, on_reasoning)
            except APIError as exc:
                errors.append(exc)
                tg.cancel_scope.cancel()

        async with anyio.create_task_group() as tg:
            for index in range(plan.choices):
                tg.start_soon(one, index)
        if errors:
            raise errors[0]
        return [r for r in results if r is not None]

    async def run(
        self,
        plan: Plan,
        index: int,
        on_event: EventHandler | None,
        on_text: TextHandler | None,
        on_reasoning: TextHandler | None = None,
    ) -> StrategyResult:
        """One run of the plan's strategy; the counters follow its samples."""
        ended = _EndedTokens()

        def sink(event: Any) -> None:
            ended.add(event)
            if on_event is not None:
                on_event(index, event)

        text_sink: TextSink | None = None if on_text is None else (lambda text: on_text(index, text))
        thought_sink: TextSink | None = (
            None if on_reasoning is None else (lambda text: on_reasoning(index, text))
        )
        orchestrator = Orchestrator(
            self.backend,
            defaults=plan.defaults,
            budget=plan.budget,
            on_event=sink,
            scorers=self.scorers,
            metrics=self.metrics,
            backends=self.backends,
        )
        try:
            strategy = plan.strategy(text_sink, thought_sink)
            # Checked here to answer in the server's words (the orchestrator's hint is the Python API's).
            check_reader(strategy, self.backends, hint=self._readers_hint())
            result = await orchestrator.run(strategy, plan.problem)
        except BackendError as exc:  # a reward model that cannot be opened: the server's fault
            raise _backend_failed(exc.one_line()) from None
        except ParagenError as exc:  # a strategy refusing its config only once it runs
            raise from_paragen(exc, param="paragen.config") from None
        except APIError:
            raise
        except Exception as exc:  # a bug in the strategy: this request's 500, the server goes on
            log.exception("run %s (%s) failed", plan.id, plan.strategy_name or "pass-through")
            raise strategy_failed(plan.strategy_name, exc) from None
        except anyio.get_cancelled_exc_class():  # the client went away: the run counts, with its tokens
            self._cancelled(ended)
            raise
        self._served(result)
        return result

    def _readers_hint(self) -> str:
        named = ", ".join(sorted(self.backends))
        if not named:
            return "this server has no named backends (paragen serve --named-backend NAME=SPEC)"
        return f"this server's named backends: {named}"

    def _cancelled(self, ended: _EndedTokens) -> None:
        stats = self.stats
        stats.runs_total += 1
        stats.runs_cancelled_total += 1
        stats.prompt_tokens_total += ended.prompt
        stats.completion_tokens_total += ended.completion

    def _served(self, result: StrategyResult) -> None:
        stats = self.stats
        stats.runs_total += 1
        stats.prompt_tokens_total += result.usage.prompt_tokens
        stats.completion_tokens_total += generated_tokens(result)


class _EndedTokens:
    """Tokens of a run's ended samples, read from its events (a cancelled run leaves no result)."""

    __slots__ = ("completion", "prompt")

    def __init__(self) -> None:
        self.prompt = 0
        self.completion = 0

    def add(self, event: Any) -> None:
        if isinstance(event, SampleEnded) and event.trace.kind != "tool":
            self.prompt += event.trace.prompt_tokens
            self.completion += event.trace.completion_tokens


def generated_tokens(result: StrategyResult) -> int:
    """Every token the run generated: samples (cancelled ones too, up to the cancel) and judges."""
    return sum(t.completion_tokens for t in result.traces if t.kind != "tool")


def failure(result: StrategyResult) -> APIError | None:
    """A 502 when the backend produced nothing usable: every sample failed, or the run did."""
    samples = [t for t in result.traces if t.kind == "sample"]
    if samples and all(t.status == "error" for t in samples):
        return _backend_failed(samples[0].error or "unknown error")
    if result.stop_reason == "error" and result.error:
        return _backend_failed(result.error)
    return None


def _backend_failed(detail: str) -> APIError:
    return APIError(502, f"the backend failed: {detail}", type="server_error", code="backend_error")


__all__ = ["Service", "Stats", "failure", "generated_tokens"]
