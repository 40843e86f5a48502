"""Scripted candidates and readers for the read-the-samples strategies (genselect, tournament, heavy)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from strategy_helpers import PROBLEM, SYNC, words

from paragen.backends.scripted import Script, ScriptedBackend, tokenize
from paragen.orchestrator import Orchestrator
from paragen.strategy import Strategy
from paragen.types import GenerateRequest, SamplingParams, StrategyResult, Trace

ANSWERS = ["4", "5", "5", "6", "7", "3"]  # candidate i boxes ANSWERS[i]
Reader = Callable[[str, list[int]], str]  # (prompt, candidates in the order shown) -> verdict text


def candidate_text(i: int) -> str:
    """Candidate i: 3 + i word tokens, the first naming it (``c{i}x0``), the last its boxed answer."""
    return words(3 + i, ANSWERS[i], stem=f"c{i}x")


def shown_order(prompt: str) -> list[int]:
    """The candidates a reading prompt shows, in the order shown."""
    return [int(i) for i in re.findall(r"\bc(\d+)x0\b", prompt)]


def prompt_of(request: GenerateRequest) -> str:
    assert request.messages is not None
    return request.messages[-1].content


def is_reading(request: GenerateRequest) -> bool:
    return len(request.messages or ()) == 1 and bool(shown_order(prompt_of(request)))


def responder(reader: Reader, texts: Sequence[str] | None = None) -> Callable[[GenerateRequest, int], Script]:
    """Solve requests get candidates (choice i: ``texts[i]``, else candidate_text); the rest ``reader``."""

    def respond(request: GenerateRequest, index: int) -> Script:
        if is_reading(request):
            prompt = prompt_of(request)
            return Script(text=reader(prompt, shown_order(prompt)))
        return Script(text=texts[index] if texts is not None else candidate_text(index))

    return respond


async def run_reading(
    strategy: Strategy,
    reader: Reader,
    *,
    texts: Sequence[str] | None = None,
    judge: ScriptedBackend | None = None,
    seed: int | None = 7,
) -> tuple[StrategyResult, ScriptedBackend]:
    """Run ``strategy`` with scripted candidates; the reading goes to ``judge`` when one is given."""
    backend = ScriptedBackend(responder(reader, texts), capabilities=SYNC)
    extra = {} if judge is None else {"judge": judge}
    orch = Orchestrator(backend, defaults=SamplingParams(max_tokens=64, seed=seed), backends=extra)
    return await orch.run(strategy, PROBLEM), backend


def labelled(result: StrategyResult, prefix: str) -> list[Trace]:
    return [t for t in result.traces if t.label.startswith(prefix)]


def prompt_tokens(prompt: str) -> int:
    """The scripted backend's count of a prompt: its word tokens."""
    return len(tokenize(prompt))
