"""The short way in: ``solve`` / ``asolve`` a question with a named strategy and backend."""

from __future__ import annotations

import functools
from typing import Any

import anyio

from paragen.backends.base import Backend
from paragen.config import Budget
from paragen.orchestrator import Orchestrator
from paragen.registry import build_backend
from paragen.strategy import Strategy, build_strategy
from paragen.types import Problem, SamplingParams, StrategyResult


async def asolve(
    question: str | Problem,
    *,
    strategy: str | Strategy = "majority",
    backend: Backend | str,
    sampling: SamplingParams | None = None,
    budget: Budget | None = None,
    **options: Any,
) -> StrategyResult:
    """Answer one question; ``options`` configure the strategy (e.g. ``n=8``).

    ``backend`` is a Backend (left open for the caller) or a spec such as ``"engine"``,
    ``"openai:http://localhost:8000/v1"`` or ``"scripted"`` (built here and closed after).
    """
    problem = question if isinstance(question, Problem) else Problem(question=question)
    chosen = build_strategy(strategy, options) if isinstance(strategy, str) else strategy
    if not isinstance(backend, str):
        async with Orchestrator(backend, defaults=sampling, budget=budget) as orchestrator:
            return await orchestrator.run(chosen, problem)
    built = build_backend(backend)
    try:
        async with Orchestrator(built, defaults=sampling, budget=budget) as orchestrator:
            return await orchestrator.run(chosen, problem)
    finally:
        await built.aclose()


def run_sync(question: str | Problem, **kwargs: Any) -> StrategyResult:
    """:func:`asolve` from synchronous code (a script, a notebook cell without a running loop)."""
    return anyio.run(functools.partial(asolve, question, **kwargs))


solve = run_sync
