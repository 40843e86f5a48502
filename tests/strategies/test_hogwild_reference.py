"""The ``reference`` protocol of hogwild, and the finisher that single and majority can take."""

from __future__ import annotations

from typing import Any

import pytest

from paragen.backends.base import Capabilities
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.backends.scripted_shared import ScriptedSharedBackend, ScriptedSharedSession, script_responder
from paragen.errors import ConfigError
from paragen.orchestrator import Orchestrator
from paragen.strategy import Strategy
from paragen.types import GenerateRequest, Problem, SamplingParams, StrategyResult
from strategies._finisher import FINISHER_TEXT
from strategies._hogwild_reference import REFERENCE_PROMPTS
from strategies.hogwild import Hogwild
from strategies.majority import Majority
from strategies.single import Single

PROBLEM = Problem(id="p", question="What is 2 + 3?", gold="5")


class _Finisher:
    """The ordinary requests' responder: records each request, answers with ``reply``."""

    def __init__(self, reply: str, first: str | None = None) -> None:
        self.reply, self.first = reply, first
        self.requests: list[GenerateRequest] = []

    def __call__(self, request: GenerateRequest, _index: int) -> Script | str:
        self.requests.append(request)
        if not request.continue_final and self.first is not None:
            return self.first
        return self.reply


def _hogwild_backend(scripts: list[str], finisher: _Finisher | None = None) -> ScriptedSharedBackend:
    session_finisher = "9}"  # what a greedy continuation of the shared view would write
    return ScriptedSharedBackend(
        lambda: ScriptedSharedSession(script_responder(scripts), finisher=session_finisher), finisher
    )


async def _run(backend: Any, strategy: Strategy, max_tokens: int = 64) -> StrategyResult:
    orch = Orchestrator(backend, defaults=SamplingParams(max_tokens=max_tokens, temperature=0.7))
    return await orch.run(strategy, PROBLEM)


def test_the_reference_protocol_sets_its_rules_and_each_can_be_overridden() -> None:
    cfg = Hogwild(protocol="reference").config
    assert cfg.prompts == REFERENCE_PROMPTS and cfg.nudge_unit == "tokens"
    assert cfg.finisher_mode == "reencode" and cfg.answer_anywhere
    assert Hogwild(protocol="reference", finisher_mode="view").config.finisher_mode == "view"
    default = Hogwild().config
    assert default.prompts != REFERENCE_PROMPTS and default.finisher_mode == "view"
    assert not default.answer_anywhere and default.nudge_unit == "passes"


def test_the_reference_prompt_has_the_papers_sections() -> None:
    text = REFERENCE_PROMPTS.system_text(3)
    for section in (
        "# Example",
        "<example>",
        "### Past steps",
        "# How to collaborate",
        "Alice, Bob and Carol",
    ):
        assert section in text
    assert "\\boxed{" not in text  # SmolLM2 answered "answer" after a prompt that showed \boxed{answer}


@pytest.mark.anyio
async def test_the_reference_puts_its_instructions_in_the_user_turn() -> None:
    backend = _hogwild_backend(["It is five.\n\nSo \\boxed{5}.\n\n", "ok " * 20])
    result = await _run(backend, Hogwild(protocol="reference"))
    (session,) = backend.sessions
    messages = [{"role": "user", "content": REFERENCE_PROMPTS.system_text(2) + "\n\n" + PROBLEM.question}]
    assert session.forwards[0].views[0] == session.apply_chat_template(messages)
    assert result.answer == "5"


@pytest.mark.anyio
async def test_an_answer_in_an_unfinished_step_counts_at_the_budgets_end() -> None:
    scripts = ["a a so the answer is \\boxed{8} and then more " + "a " * 30, "b " * 50]
    reference = await _run(_hogwild_backend(scripts), Hogwild(protocol="reference", max_forward_passes=14))
    assert reference.answer == "8" and reference.metrics["finisher"] == 0.0
    paragen = await _run(_hogwild_backend(scripts), Hogwild(max_forward_passes=14))
    assert paragen.answer == "9" and paragen.metrics["finisher"] == 1.0  # the view finisher ignored it


@pytest.mark.anyio
async def test_the_reencoded_finisher_is_a_fresh_greedy_request_over_the_flattened_text() -> None:
    finisher = _Finisher("7} and more")
    backend = _hogwild_backend(["a " * 50, "b " * 50], finisher)
    result = await _run(backend, Hogwild(protocol="reference", max_forward_passes=10))
    alice, bob, last = result.traces
    assert result.answer == "7" and last.label == "finisher" and last.parents == [alice.id, bob.id]
    (request,) = finisher.requests
    assert request.continue_final and request.params.temperature == 0.0 and request.params.max_tokens == 16
    user, reply = request.messages or ()
    assert user.content.endswith(PROBLEM.question) and "# How to collaborate" in user.content
    expected = (
        "\n\n### Work in progress (others)\n\n"  # no history header: the reference's cache has none
        + alice.text  # each worker's unfinished step (here: all it wrote)
        + "<...>\n\n"
        + bob.text
        + "<...>\n\n"
        + FINISHER_TEXT
    )
    assert reply.role == "assistant" and reply.content == expected
    assert not any(f.greedy for f in backend.sessions[0].forwards)  # nothing continued the shared view
    assert result.usage.sequential_tokens == 10 + last.completion_tokens
    assert result.usage.total_tokens == 20 + last.completion_tokens


@pytest.mark.anyio
async def test_single_with_the_finisher_answers_a_cut_off_sample() -> None:
    finisher = _Finisher("42} done", first="thinking " * 40)
    result = await _run(ScriptedBackend(finisher), Single(finisher=True), max_tokens=20)
    sample, last = result.traces
    assert sample.finish_reason == "length" and last.label == "finisher" and last.parents == [sample.id]
    assert result.answer == "42" and result.text is not None and FINISHER_TEXT in result.text
    assert finisher.requests[1].messages is not None
    assert finisher.requests[1].messages[-1].content == sample.text + FINISHER_TEXT
    assert result.usage.sequential_tokens == 20 + last.completion_tokens


@pytest.mark.anyio
async def test_the_finisher_leaves_finished_samples_alone() -> None:
    finisher = _Finisher("1}", first="It is \\boxed{5}.")
    result = await _run(ScriptedBackend(finisher), Single(finisher=True))
    assert result.answer == "5" and len(result.traces) == 1


@pytest.mark.anyio
async def test_majority_with_the_finisher_votes_over_the_finished_answers() -> None:
    samples: list[int] = []

    def respond(request: GenerateRequest, _index: int) -> Script | str:
        if request.continue_final:
            return "6}"
        samples.append(1)
        return "So \\boxed{5}." if len(samples) == 1 else "long " * 40

    result = await _run(ScriptedBackend(respond), Majority(n=3, finisher=True), max_tokens=20)
    finishers = [t for t in result.traces if t.label == "finisher"]
    assert len(finishers) == 2 and result.answer == "6"
    assert result.metrics["votes_for_winner"] == 2.0


@pytest.mark.anyio
async def test_the_finisher_is_refused_where_a_reply_cannot_be_continued() -> None:
    backend = ScriptedBackend(["x"], capabilities=Capabilities(continue_final=False))
    with pytest.raises(ConfigError, match="finisher"):
        await _run(backend, Single(finisher=True))
