"""hogwild_text (the approximation): rounds of chunks whose prompts carry the others' text."""

from __future__ import annotations

import re
from typing import Any

import pytest

from paragen.backends.base import Capabilities
from paragen.backends.scripted import ScriptedBackend
from paragen.events import WorkerText
from paragen.orchestrator import Orchestrator
from paragen.types import GenerateRequest, Problem, SamplingParams, StrategyResult
from strategies.hogwild_text import HogwildText

PROBLEM = Problem(id="p", question="What is 2 + 3?", gold="5")
_OWN = re.compile(r"\*\*(\w+) \[\d+\]:\*\*")


def _view(request: GenerateRequest) -> str:
    if request.messages is not None:
        return request.messages[-1].content
    assert request.prompt is not None
    return request.prompt


def _who(request: GenerateRequest) -> str:
    who: str = _OWN.findall(_view(request))[-1]
    return who  # the worker's own step comes last in its view


def _reacting(request: GenerateRequest, _index: int) -> str:
    """Alice finds five; Bob agrees once he can read her step, never before."""
    view = _view(request)
    if request.params.temperature == 0.0:
        return "9}"  # the finisher
    if _who(request) == "Alice":
        return "I add them. It is five.\n\n" if "It is five." not in view else "Waiting for Bob."
    if "It is five." in view:
        return "Alice says five, I agree. So \\boxed{5}.\n\n"
    return "I will check Alice. Let me see.\n\n"


async def _run(backend: ScriptedBackend, events: list[object] | None = None, **config: Any) -> StrategyResult:
    sink = None if events is None else events.append
    orch = Orchestrator(backend, defaults=SamplingParams(max_tokens=64), on_event=sink)
    return await orch.run(HogwildText(**config), PROBLEM)


@pytest.mark.anyio
async def test_each_round_sees_the_others_text_of_the_round_before() -> None:
    backend = ScriptedBackend(_reacting, capabilities=Capabilities(continue_final=True))
    events: list[object] = []
    result = await _run(backend, events)
    assert result.answer == "5"
    assert [t.label for t in result.traces] == ["Alice#0", "Bob#0", "Alice#1", "Bob#1"]
    first_bob = backend.streams[1].request
    assert "It is five." not in _view(first_bob)  # round 0: nothing of Alice's yet
    assert "I add them. It is five." in _view(backend.streams[3].request)
    assert all(s.request.continue_final and s.request.params.stop == ("\n\n",) for s in backend.streams)
    rounds = [max(t.completion_tokens for t in result.traces[i : i + 2]) for i in (0, 2)]
    assert result.usage.sequential_tokens == sum(rounds)
    assert result.usage.total_tokens == sum(t.completion_tokens for t in result.traces)
    bob_text = "".join(e.text for e in events if isinstance(e, WorkerText) and e.worker == 1)
    assert "I will check Alice. Let me see.\n\n**Bob [2]:** Alice says five" in bob_text


@pytest.mark.anyio
async def test_the_finisher_answers_when_the_budget_is_spent() -> None:
    backend = ScriptedBackend(
        lambda r, _i: "9}" if r.params.temperature == 0.0 else "word " * 20,
        capabilities=Capabilities(continue_final=True),
    )
    result = await _run(backend, max_forward_passes=8, chunk_tokens=4)
    *chunks, finisher = result.traces
    assert len(chunks) == 4 and finisher.label == "finisher" and result.answer == "9"
    assert result.usage.sequential_tokens == 8 + 1
    assert _view(backend.streams[-1].request).endswith("the final answer is \\boxed{")
    assert backend.streams[-1].request.params.max_tokens == 16


@pytest.mark.anyio
async def test_raw_prompt_backends_get_the_view_as_text() -> None:
    backend = ScriptedBackend(_reacting, capabilities=Capabilities(continue_final=False))
    result = await _run(backend)
    assert result.answer == "5"
    assert all(s.request.prompt is not None and "What is 2 + 3?" in s.request.prompt for s in backend.streams)
