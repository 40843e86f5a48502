"""Shared helpers for the strategy tests: run a strategy on a scripted backend."""

from __future__ import annotations

from collections.abc import Sequence

from paragen.backends.base import Capabilities
from paragen.backends.scripted import Script, ScriptedBackend, StreamRecord, fanout_choice
from paragen.orchestrator import Orchestrator
from paragen.strategy import Strategy
from paragen.types import Problem, SamplingParams, StrategyResult, Trace

PROBLEM = Problem(id="p", question="What is 2 + 3?", gold="5")
SYNC = Capabilities(native_n=True, per_choice_abort=True, logprobs=True, continue_final=True, tokenizer=True)


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


def by_choice(streams: Sequence[StreamRecord]) -> list[StreamRecord]:
    """One fan-out's streams by choice (the order of its scripts), not in the order they opened."""
    return sorted(streams, key=lambda s: fanout_choice(s.request, 0)[1])
