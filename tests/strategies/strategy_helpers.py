"""Shared helpers for the strategy tests: run a strategy on a scripted backend."""

from __future__ import annotations

from collections.abc import Sequence

from paragen.backends.base import Capabilities
from paragen.backends.scripted import Script, ScriptedBackend
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
    backend = scripts if isinstance(scripts, ScriptedBackend) else ScriptedBackend(scripts, capabilities=caps)
    orch = Orchestrator(backend, defaults=SamplingParams(max_tokens=max_tokens))
    return await orch.run(strategy, PROBLEM), backend


def samples(result: StrategyResult) -> list[Trace]:
    return [t for t in result.traces if t.kind == "sample"]
