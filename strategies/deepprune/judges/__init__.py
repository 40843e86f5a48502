"""Equivalence judges: P(two partial traces reach the same final answer).

Judges are plugins under the entry-point group "paragen.judges"; the built-ins are
``lexical`` (n-gram Jaccard), ``embedding`` (sentence-embedding cosine, all-MiniLM-L6-v2),
``llm`` (yes/no probability from the run's own backend) and ``model`` (an in-process judge
model such as THU-KEG/DeepPrune-Judge-4B, given a local path). A judge that is not registered
may be named by its class, ``package.module:Class``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import anyio
import anyio.to_thread

from paragen import RunContext
from paragen.errors import ConfigError
from paragen.registry import JUDGE_GROUP, load

Pair = tuple[str, str]

BUILTIN = {
    "lexical": "strategies.deepprune.judges.lexical:LexicalJudge",
    "embedding": "strategies.deepprune.judges.embedding:EmbeddingJudge",
    "llm": "strategies.deepprune.judges.llm:LLMJudge",
    "model": "strategies.deepprune.judges.model:ModelJudge",
}


@runtime_checkable
class Judge(Protocol):
    """Scores pairs of trace prefixes with the probability that they end in the same answer."""

    name: str

    async def same_answer(self, pairs: Sequence[Pair], ctx: RunContext | None = None) -> list[float]: ...


async def scored_in_thread(
    lock: anyio.Lock, score: Callable[[list[Pair]], list[float]], pairs: Sequence[Pair]
) -> list[float]:
    """A local model's blocking ``score`` of ``pairs`` in a worker thread, one batch at a time (the
    event loop goes on streaming meanwhile)."""
    if not pairs:
        return []
    async with lock:
        return await anyio.to_thread.run_sync(score, list(pairs))


def load_judge(name: str, options: dict[str, Any] | None = None) -> Judge:
    """Build the judge registered as ``name`` (entry points first, then the built-ins), or the class a
    ``module:Class`` spec names."""
    cls = load(JUDGE_GROUP, name, BUILTIN)
    try:
        judge = cls(**(options or {}))
    except TypeError as exc:
        raise ConfigError(f"judge {name!r}: {exc}", hint="check judge_options") from exc
    if not isinstance(judge, Judge):
        raise ConfigError(f"judge {name!r} does not implement same_answer()")
    return judge


__all__ = ["BUILTIN", "Judge", "Pair", "load_judge", "scored_in_thread"]
