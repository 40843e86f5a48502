"""Open scorers by spec, once per process part that owns them, and close them together.

A PRM is a model: opening one per request (``paragen serve``) or per problem (a sweep) would
load it again each time. Whoever owns an Orchestrator owns its :class:`Scorers` (or lets the
Orchestrator make one and close it with ``aclose()``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import anyio

from paragen.errors import ConfigError
from paragen.registry import resolve
from paragen.scoring.base import SPEC_HINT, Scorer, parse_scorer_spec

LLM_VERIFIER = "llm"
# kind -> "module:Class"; each class is built as Class(target, **options) and may have ``async open()``.
SCORER_KINDS: dict[str, str] = {
    "engine": "paragen.scoring.engine:EngineScorer",
    "vllm": "paragen.scoring.vllm_inproc:VLLMScorer",
    "vllm-server": "paragen.scoring.vllm_server:VLLMServerScorer",
    "scripted": "paragen.scoring.scripted:scorer_from_file",  # tests, benchmarks, model-free demos
}


# ``custom:NAME`` names a Scorer object given in Python (``Scorers({"custom:NAME": scorer})``).
CUSTOM = "custom"


def build_scorer(spec: str) -> Scorer:
    """A scorer from its spec, not yet opened (``llm`` is not an object: ``ctx.score`` runs it)."""
    kind, target, options = parse_scorer_spec(spec)
    if kind == CUSTOM:
        raise ConfigError(
            f"no scorer was given under {spec!r}",
            hint=f"Orchestrator(..., scorers=Scorers({{{spec!r}: your_scorer}}))",
        )
    if kind not in SCORER_KINDS:
        raise ConfigError(f"unknown scorer {spec!r}", hint=SPEC_HINT)
    if not target:
        raise ConfigError(f"scorer {kind!r} needs a target ({kind}:...)", hint=SPEC_HINT)
    cls: Any = resolve(SCORER_KINDS[kind], "scorer")
    try:
        scorer: Scorer = cls(target, **options)
    except ConfigError:  # the scorer's own one line (a ValueError too, so caught first)
        raise
    except (TypeError, ValueError, OSError) as exc:  # an option it does not take, a bad value or file
        raise ConfigError(f"scorer {spec!r}: {exc}", hint=SPEC_HINT) from exc
    return scorer


def check_scorer_spec(spec: str) -> str:
    """``spec`` if it names a known scorer (for config validators; opening it checks the rest)."""
    kind, target, _ = parse_scorer_spec(spec)
    if kind == LLM_VERIFIER and target is None:
        return spec
    if kind not in SCORER_KINDS and kind != CUSTOM:
        raise ConfigError(f"unknown scorer {spec!r}", hint=SPEC_HINT)
    if not target:
        raise ConfigError(f"scorer {kind!r} needs a target ({kind}:...)", hint=SPEC_HINT)
    return spec


class Scorers:
    """The scorers opened so far, by spec; ``given`` ones (a test's scripted scorer) are used as they are.

    ``allowed``, when set, is every spec that may be opened (``paragen serve --scorer``): a spec
    from elsewhere (a client's request) must not make the process load a model, read a file or
    call a URL of its choosing.
    """

    def __init__(
        self, given: Mapping[str, Scorer] | None = None, *, allowed: Collection[str] | None = None
    ) -> None:
        self._given = dict(given or {})
        self._allowed = None if allowed is None else frozenset(allowed)
        self._opened: dict[str, Scorer] = {}
        self._lock = anyio.Lock()

    async def get(self, spec: str) -> Scorer:
        """The scorer for ``spec``, opened on first use (a wrong path or URL fails here, once)."""
        found = self._given.get(spec)
        if found is None:
            found = self._opened.get(spec)
        if found is not None:  # the common case, every ctx.score: no lock
            return found
        if self._allowed is not None and spec not in self._allowed:
            raise ConfigError(
                f"scorer {spec!r} is not served here",
                hint="the server's operator names the scorers clients may use (paragen serve --scorer SPEC)",
            )
        async with self._lock:  # one open per spec, however many runs ask for it at once
            if spec not in self._opened:
                self._opened[spec] = await _opened(build_scorer(spec))
            return self._opened[spec]

    async def aclose(self) -> None:
        """Close what this pool opened (given scorers belong to whoever gave them)."""
        opened, self._opened = list(self._opened.values()), {}
        for scorer in opened:
            with anyio.CancelScope(shield=True):
                await scorer.aclose()


async def _opened(scorer: Scorer) -> Scorer:
    """``scorer`` after its ``open()``; closed again if that fails (a client or engine half made)."""
    opener = getattr(scorer, "open", None)
    if opener is None:
        return scorer
    try:
        await opener()
    except BaseException:
        with anyio.CancelScope(shield=True):
            await scorer.aclose()
        raise
    return scorer
