"""Preflight: before anything is generated, can each strategy run on this backend, and run whole?

Two checks per (strategy, backend) pair, after the backend is opened (its capabilities probed):

* **capabilities**: the strategy is run on a stand-in backend until it asks for its first sample
  (or shared session), and then cancelled. The refusals a strategy makes up front
  (``ctx.require_continuation``, ``shared_cache``, logprobs...) are raised there, exactly as in a
  real run, so the checks are the strategies' own and are not repeated here.
* **size**: the samples it runs at once (``parallel_samples``) and their ``max_tokens`` against
  what the backend can hold (``backend.capacity()``; the engine's ``check_fits`` for the hard limit
  of its batch slots and KV blocks). What cannot run at all is a :class:`PreflightError`; what
  runs only in part (samples cut at the context length, samples that wait for cache) is a warning.

Every pair is checked before any error is raised, so one error names every problem at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio

from paragen import tracing
from paragen.backends.base import Backend, Capabilities, Capacity, estimate_tokens
from paragen.config import Budget
from paragen.errors import ConfigError, ParagenError
from paragen.strategy import Strategy, parallel_samples
from paragen.types import GenerateRequest, Problem, SamplingParams

DRY_RUN_S = 10.0  # a strategy that has not asked for a sample by then is not held up longer


class PreflightError(ConfigError):
    """Strategies that cannot run on this backend: one line each, all of them."""

    def __init__(self, lines: Sequence[str]) -> None:
        self.lines = list(lines)
        super().__init__("; ".join(self.lines), hint=None)

    def one_line(self) -> str:
        # One line per refusal (the CLI prints this and exits 2): every one is seen at once.
        return "\n".join(f"cannot run: {line}" for line in self.lines)


@dataclass
class Verdict:
    """What preflight found: lines for what cannot run, warnings for what runs only in part."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def raise_errors(self) -> None:
        if self.errors:
            raise PreflightError(self.errors)


async def preflight(
    backend: Backend,
    strategies: Sequence[tuple[str, Strategy]],
    problem: Problem,
    *,
    sampling: SamplingParams,
    backends: Mapping[str, Backend] | None = None,
) -> Verdict:
    """Check each ``(label, strategy)`` on ``backend`` (opened) against ``problem`` (a sweep's first);
    ``backends``: the named ones the strategies may read with, as the run has them."""
    verdict = Verdict()
    for label, strategy in strategies:
        requests, refusal = await dry_run(backend, strategy, problem, sampling, backends=backends)
        if refusal is not None:
            verdict.errors.append(f"{label}: {refusal}")
            continue
        await _check_size(backend, label, strategy, problem, requests, sampling, verdict)
    return verdict


async def dry_run(
    backend: Backend,
    strategy: Strategy,
    problem: Problem,
    sampling: SamplingParams,
    *,
    backends: Mapping[str, Backend] | None = None,
) -> tuple[list[GenerateRequest], str | None]:
    """Run ``strategy`` until its first sample, never generating: the requests it asked for, and its
    refusal (a ParagenError's line) if it refused before sampling."""
    from paragen.orchestrator import Orchestrator  # the orchestrator imports the strategies' side

    with anyio.CancelScope() as scope, tracing.muted():  # no spans of a run the user did not ask for
        dry = _DryBackend(backend, scope)
        # The named ones stand in too: a first sample there (a reader) ends the dry run the same way.
        others: dict[str, Backend] = {name: _DryBackend(b, scope) for name, b in (backends or {}).items()}
        orchestrator = Orchestrator(dry, defaults=sampling, budget=Budget(), backends=others)
        try:
            with anyio.move_on_after(DRY_RUN_S):
                await orchestrator.run(strategy, problem)
        except ParagenError as exc:
            return dry.requests, exc.message + (f" ({exc.hint})" if exc.hint else "")
        except Exception:  # a bug: the sweep records it as the run's failure, as before
            return dry.requests, None
        finally:
            await orchestrator.aclose()
    return dry.requests, None


class _DryBackend:
    """The real backend's capabilities and tokenizer; the first generation cancels the dry run."""

    def __init__(self, backend: Backend, scope: anyio.CancelScope) -> None:
        self.name = backend.name
        self._backend = backend
        self._scope = scope
        self.requests: list[GenerateRequest] = []

    @property
    def capabilities(self) -> Capabilities:
        return self._backend.capabilities

    def stream(self, request: GenerateRequest) -> Any:
        self.requests.append(request)
        return self._reached()

    def shared_session(self, *_args: Any, **_kwargs: Any) -> Any:
        return self._reached()

    @asynccontextmanager
    async def _reached(self) -> AsyncIterator[Any]:
        self._scope.cancel()
        await anyio.sleep_forever()
        yield None  # never reached: the scope is cancelled

    async def count_tokens(self, text: str) -> tuple[int, str]:
        return await self._backend.count_tokens(text)

    async def aclose(self) -> None:
        return None


async def _check_size(
    backend: Backend,
    label: str,
    strategy: Strategy,
    problem: Problem,
    requests: list[GenerateRequest],
    sampling: SamplingParams,
    verdict: Verdict,
) -> None:
    n = parallel_samples(strategy)
    max_tokens = max((r.params.max_tokens for r in requests), default=sampling.max_tokens)
    prompt = await _prompt_tokens(backend, problem, requests)
    fits = getattr(backend, "check_fits", None)
    if callable(fits):
        try:
            fits(prompt, n)
        except ParagenError as exc:
            verdict.errors.append(
                f"{label}: {exc.message} ({exc.hint})" if exc.hint else f"{label}: {exc.message}"
            )
            return
    capacity = _capacity(backend)
    if capacity is None:
        return
    verdict.errors.extend(f"{label}: {line}" for line in capacity.refusals(n, prompt, max_tokens))
    verdict.warnings.extend(f"{label}: {line}" for line in capacity.shortfalls(n, prompt, max_tokens))


def _capacity(backend: Backend) -> Capacity | None:
    method = getattr(backend, "capacity", None)
    value = method() if callable(method) else None
    return value if isinstance(value, Capacity) else None


async def _prompt_tokens(backend: Backend, problem: Problem, requests: list[GenerateRequest]) -> int:
    """The first request's prompt in tokens (rendered where the backend can), else the question's."""
    render = getattr(backend, "prompt_ids", None)
    if requests and callable(render):
        try:
            return len(render(requests[0]))
        except ParagenError:
            pass
    try:
        count, _how = await backend.count_tokens(problem.question)
    except ParagenError:  # a server's tokenize endpoint is an aid: the sweep must not die of it
        return estimate_tokens(problem.question)
    return count
