"""Trace rankers: plain functions that rate a finished trace, with no model behind them.

A :class:`~paragen.scoring.base.Scorer` is a model (a PRM or ORM) asked through ``ctx.score``; a
ranker is a pure function of what a trace already holds (its log-probabilities, its length), so
best-of-n and the eval bank call it directly. Built-ins: ``mean_logprob`` and ``shortest``; any
``package.module:function`` taking a Trace and returning a float is one too. Higher is better.
"""

from __future__ import annotations

from collections.abc import Callable

from paragen.registry import resolve_function
from paragen.types import Trace

TraceRanker = Callable[[Trace], float]


def mean_logprob(trace: Trace) -> float:
    """Average log-probability of the sampled tokens (higher = the model was surer)."""
    if not trace.logprobs:
        return float("-inf")
    return sum(trace.logprobs) / len(trace.logprobs)


def shortest(trace: Trace) -> float:
    """Prefer shorter traces (FFS's observation that correct traces tend to be shorter)."""
    return -float(trace.completion_tokens)


TRACE_RANKERS: dict[str, TraceRanker] = {"mean_logprob": mean_logprob, "shortest": shortest}


def load_trace_ranker(spec: str, kind: str = "trace ranker") -> TraceRanker:
    """A built-in ranker by name, or a user's function by ``package.module:function``.

    ``kind`` names it in an error as the user knows it (best-of-n's ``scorer`` option).
    """
    ranker: TraceRanker = resolve_function(spec, kind, TRACE_RANKERS)
    return ranker


__all__ = ["TRACE_RANKERS", "TraceRanker", "load_trace_ranker", "mean_logprob", "shortest"]
