"""Shared helpers for the strategy tests: run a strategy on a scripted backend."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from paragen.backends.base import Capabilities
from paragen.backends.scripted import Responder, Script, ScriptedBackend, StreamRecord, fanout_choice
from paragen.orchestrator import Orchestrator
from paragen.strategy import Strategy
from paragen.types import Delta, GenerateRequest, Problem, SamplingParams, StrategyResult, Trace

PROBLEM = Problem(id="p", question="What is 2 + 3?", gold="5")
SYNC = Capabilities(native_n=True, per_choice_abort=True, logprobs=True, continue_final=True)


def words(n: int, answer: str | None = None, stem: str = "step") -> str:
    """``n`` word tokens, the last ones boxing ``answer`` when given."""
    body = [f"{stem}{i}" for i in range(n - (1 if answer is not None else 0))]
    if answer is not None:
        body.append(f"\\boxed{{{answer}}}")
    return " ".join(body)


async def run(
    strategy: Strategy,
    scripts: Sequence[Script | str] | ScriptedBackend,
    *,
    caps: Capabilities | None = None,
    max_tokens: int = 512,
) -> tuple[StrategyResult, ScriptedBackend]:
    if not isinstance(scripts, ScriptedBackend):
        # Each fan-out's choice i gets its i-th script, whatever order the loop starts samples in.
        scripts = ScriptedBackend(scripts, capabilities=caps, order="fanout")
    backend = scripts
    orch = Orchestrator(backend, defaults=SamplingParams(max_tokens=max_tokens))
    return await orch.run(strategy, PROBLEM), backend


def samples(result: StrategyResult) -> list[Trace]:
    return [t for t in result.traces if t.kind == "sample"]


class RewritingBackend(ScriptedBackend):
    """A scripted backend whose every delta passes through ``rewrite`` on its way out (a test sets
    the logprobs its confidence measure reads from the delta's text)."""

    def __init__(
        self, responder: Responder, rewrite: Callable[[Delta], None], *, capabilities: Capabilities
    ) -> None:
        super().__init__(responder, capabilities=capabilities)
        self._rewrite = rewrite

    @asynccontextmanager
    async def stream(self, request: GenerateRequest) -> AsyncIterator[Any]:
        async with super().stream(request) as inner:
            yield _Rewritten(inner, self._rewrite)


class _Rewritten:
    def __init__(self, inner: Any, rewrite: Callable[[Delta], None]) -> None:
        self._inner = inner
        self._rewrite = rewrite
        self.usage = inner.usage

    async def abort(self, index: int) -> None:
        await self._inner.abort(index)

    async def __aiter__(self) -> AsyncIterator[Delta]:
        async for delta in self._inner:
            self._rewrite(delta)
            yield delta


def by_choice(streams: Sequence[StreamRecord]) -> list[StreamRecord]:
    """One fan-out's streams by choice (the order of its scripts), not in the order they opened."""
    return sorted(streams, key=lambda s: fanout_choice(s.request, 0)[1])
