"""Hogwild!: step rules, layouts, nudges, finisher, budget and cancellation on the scripted shared session."""

from __future__ import annotations

import io
from typing import Any

import anyio
import pytest
from pydantic import TypeAdapter
from rich.console import Console

from paragen._live_view import WorkerColumns
from paragen.backends.scripted import ScriptedBackend
from paragen.backends.scripted_shared import (
    ScriptedSharedBackend,
    ScriptedSharedSession,
    SharedResponder,
    script_responder,
)
from paragen.config import Budget
from paragen.errors import ConfigError
from paragen.events import Event, WorkerText
from paragen.orchestrator import Orchestrator
from paragen.prompts import solve_messages
from paragen.types import Problem, SamplingParams, StrategyResult
from strategies._hogwild_prompts import HogwildPrompts, ends_step
from strategies.hogwild import Hogwild

PROBLEM = Problem(id="p", question="What is 2 + 3?", gold="5")
ALICE_ANSWERS = "Two plus three. It is five.\n\nSo \\boxed{5}.\n\nextra words here"
BOB_CHATS = "I will check. " + "still checking " * 40


def _backend(responder: SharedResponder, *, finisher: str = "", delay: float = 0.0) -> ScriptedSharedBackend:
    return ScriptedSharedBackend(
        lambda: ScriptedSharedSession(responder, finisher=finisher, forward_delay=delay)
    )


async def _run(
    backend: ScriptedSharedBackend | ScriptedBackend,
    *,
    max_tokens: int = 64,
    budget: Budget | None = None,
    events: list[object] | None = None,
    **config: Any,
) -> StrategyResult:
    sink = None if events is None else events.append
    orch = Orchestrator(backend, defaults=SamplingParams(max_tokens=max_tokens), budget=budget, on_event=sink)
    return await orch.run(Hogwild(**config), PROBLEM)


def _session(backend: ScriptedSharedBackend) -> ScriptedSharedSession:
    (session,) = backend.sessions
    return session


# -- the step rule (pure) ------------------------------------------------------------------------


def test_a_step_ends_at_a_blank_line_after_a_sentence() -> None:
    assert ends_step("It is five.\n\n", 2) == len("It is five.")
    assert ends_step("It is five?  \n\n", 1) == len("It is five?  ")


@pytest.mark.parametrize(
    ("text", "new"),
    [
        ("We need:\n\n", 2),  # a colon does not end a sentence
        ("Then, \n\n", 2),
        ("```\nprint(1).\n\n", 2),  # inside a code block
        ("Done.\n\nmore", 4),  # the blank line was not written by the newest token
        ("no blank line.", 1),
    ],
)
def test_no_step_end(text: str, new: int) -> None:
    assert ends_step(text, new) is None


# -- collaboration ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_finished_step_with_a_boxed_answer_ends_the_run() -> None:
    backend = _backend(script_responder([ALICE_ANSWERS, BOB_CHATS]))
    result = await _run(backend)
    assert result.answer == "5"
    alice, bob = result.traces
    assert (alice.label, bob.label) == ("Alice", "Bob")
    assert alice.text.startswith("\n\n**Alice [1]:** Hi, I'm Alice.")
    assert alice.text.endswith("It is five.\n\n**Alice [2]:** So \\boxed{5}.\n\n")
    assert "[3]" not in alice.text  # it stopped at the step that boxed the answer
    passes = result.metrics["forward_passes"]
    assert alice.completion_tokens == bob.completion_tokens == passes
    assert result.usage.sequential_tokens == passes
    assert result.usage.total_tokens == 2 * passes
    assert result.metrics["finisher"] == 0.0 and alice.answer == "5"
    assert result.usage.count_sources == ["token_ids"]


@pytest.mark.anyio
async def test_workers_see_each_others_tokens_in_the_same_forward_pass() -> None:
    backend = _backend(script_responder(["alpha beta gamma delta", "one two three four"]))
    await _run(backend, max_forward_passes=4)
    session = _session(backend)
    decode = [f for f in session.forwards if not f.greedy and len(f.rows) == 2 and f.suppress]
    third = decode[2]  # inputs: Alice writes " beta", Bob " two" ...
    alice_view, bob_view = third.views
    assert alice_view.endswith(" beta") and " two <...>" in alice_view
    assert bob_view.endswith(" two") and " beta <...>" in bob_view
    assert "### Work in progress (others)" in bob_view and bob_view.index("(others)") < bob_view.index(
        "(own)"
    )


def _views_after_one_step(layout: str) -> tuple[str, str]:
    scripts = ["First idea here.\n\nsecond step words go on", "my own words " * 10]
    backend = _backend(script_responder(scripts))
    anyio.run(lambda: _run(backend, max_forward_passes=14, layout=layout))
    last = [f for f in _session(backend).forwards if not f.greedy][-1]
    alice, bob = (view.split("<|assistant|>\n", 1)[1] for view in last.views)  # the prompt cut off
    return alice, bob


def test_combined_layout_history_then_others_then_own() -> None:
    _alice, bob = _views_after_one_step("combined")
    history = bob.index("### Past steps")
    assert history < bob.index("First idea here.") < bob.index("(others)") < bob.index("second step")
    assert bob.index("second step") < bob.index("(own)") < bob.rindex("my own words")


def test_interleaved_layout_hides_unfinished_steps() -> None:
    alice, bob = _views_after_one_step("interleaved")
    assert "First idea here." in bob and "second step" not in bob  # finished: shown; unfinished: not
    assert "my own words" not in alice


def test_contiguous_layout_others_whole_text_then_own() -> None:
    _alice, bob = _views_after_one_step("contiguous")
    assert "### Past steps" not in bob
    assert (
        bob.index("First idea here.") < bob.index("second step") < bob.index(" <...>") < bob.index("my own")
    )


@pytest.mark.anyio
async def test_workers_cannot_end_the_sequence_and_headers_are_suppressed() -> None:
    backend = _backend(script_responder(["short.", "also short."]))  # then EOS forever
    result = await _run(backend, max_forward_passes=6)
    session = _session(backend)
    decode = [f for f in session.forwards if f.suppress]
    assert decode and all(session.eos_token_ids <= f.suppress for f in decode)
    assert session.tokenize("###")[0] in decode[0].suppress
    assert result.traces[0].text.endswith(" more more more more")  # the filler the session gave instead


@pytest.mark.anyio
async def test_the_finisher_answers_greedily_from_the_last_workers_view_when_the_budget_is_spent() -> None:
    backend = _backend(script_responder(["a " * 50, "b " * 50]), finisher="7} and more")
    result = await _run(backend, max_forward_passes=10)
    alice, bob, finisher = result.traces
    assert result.answer == "7" and finisher.label == "finisher" and finisher.text == "7}"
    assert alice.completion_tokens == bob.completion_tokens == 10
    assert alice.finish_reason == "length" and finisher.parents == [alice.id, bob.id]
    greedy = [f for f in _session(backend).forwards if f.greedy]
    assert greedy[0].rows[0].worker == 1 and greedy[0].views[0].endswith("the final answer is \\boxed{")
    assert result.usage.total_tokens == 20 + 1  # "7}" is one token here
    assert result.usage.sequential_tokens == 10 + 1
    assert result.metrics["finisher"] == 1.0


@pytest.mark.anyio
async def test_the_run_budget_caps_forward_passes() -> None:
    backend = _backend(script_responder(["a " * 50, "b " * 50]), finisher="1}")
    result = await _run(backend, max_tokens=64, budget=Budget(max_sequential_tokens=5))
    assert result.metrics["forward_passes"] == 5


@pytest.mark.anyio
async def test_a_nudge_goes_to_the_first_worker_that_starts_a_step_after_the_period() -> None:
    scripts = ["Go.\n\nx x x x Done.\n\ny y Ok.\n\nz z z", "Fine.\n\nw w w w w w w w w w Sure.\n\nq q"]
    backend = _backend(script_responder(scripts))
    result = await _run(backend, max_forward_passes=16, nudge_every=5)
    nudge = HogwildPrompts().nudge
    alice, bob = result.traces[:2]
    assert result.metrics["nudges"] >= 1
    assert alice.text.count(nudge) + bob.text.count(nudge) == result.metrics["nudges"]
    assert nudge not in alice.text.split("Done.")[0] and nudge not in bob.text.split("Sure.")[0]


@pytest.mark.anyio
async def test_worker_text_events_rebuild_every_workers_text() -> None:
    events: list[object] = []
    backend = _backend(script_responder([ALICE_ANSWERS, BOB_CHATS]))
    result = await _run(backend, events=events)
    for trace in result.traces:
        pieces = [e.text for e in events if isinstance(e, WorkerText) and e.trace_id == trace.id]
        assert "".join(pieces) == trace.text


@pytest.mark.anyio
async def test_a_cancelled_run_frees_every_segment_and_keeps_the_traces() -> None:
    backend = _backend(script_responder(["a " * 500, "b " * 500]), delay=0.01)
    result = await _run(backend, max_tokens=400, budget=Budget(deadline_s=0.3))
    session = _session(backend)
    assert result.stop_reason == "deadline" and session.segments == {} and len(session.freed) >= 6
    assert all(t.status == "cancelled" and t.completion_tokens > 0 for t in result.traces)


@pytest.mark.anyio
async def test_the_total_budget_stops_the_session_without_a_finisher() -> None:
    backend = _backend(script_responder(["a " * 50, "b " * 50]), finisher="3}")
    result = await _run(backend, budget=Budget(max_total_tokens=9))
    assert result.stop_reason == "budget" and len(result.traces) == 2
    assert all(t.cancel_reason == "budget" for t in result.traces)
    assert result.usage.total_tokens == 10  # the pass that crossed the cap finished for both rows
    assert _session(backend).segments == {}


# -- one worker is plain decoding ------------------------------------------------------------------


@pytest.mark.anyio
async def test_one_worker_is_plain_decoding() -> None:
    backend = _backend(script_responder(["It is 5. The answer is 5"]))
    result = await _run(backend, workers=1)
    session = _session(backend)
    prompt = session.apply_chat_template([m.model_dump() for m in solve_messages(PROBLEM.question)])
    first = session.forwards[0]
    assert first.views == [prompt]
    assert all(not f.suppress for f in session.forwards)
    (trace,) = result.traces
    assert trace.text == "It is 5. The answer is 5" and trace.finish_reason == "stop"
    assert trace.completion_tokens == len(session.forwards) == 8  # 7 words and the end-of-sequence token
    assert result.answer == "5" and result.metrics["finisher"] == 0.0


# -- refusals ---------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_backend_without_shared_cache_points_to_hogwild_text() -> None:
    with pytest.raises(ConfigError, match="hogwild_text"):
        await _run(ScriptedBackend(["x"]))


@pytest.mark.parametrize("config", [{"workers": 0}, {"layout": "ring"}, {"nudge_every": -1}, {"bogus": 1}])
def test_bad_config_is_refused(config: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        Hogwild(**config)


# -- the live view ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_live_view_shows_each_worker_in_its_own_column() -> None:
    out = io.StringIO()
    view = WorkerColumns(Console(file=out, width=120, height=30, force_terminal=False))
    backend = _backend(script_responder([ALICE_ANSWERS, BOB_CHATS]))
    with view:
        await _run(backend, events=_Sink(view))
    frame = out.getvalue()
    assert "Alice" in frame and "Bob" in frame
    header = next(line for line in frame.splitlines() if "Alice" in line and "Bob" in line)
    assert header.index("Alice") < header.index("Bob")  # side by side, not one after the other
    assert view.texts[0].endswith("\\boxed{5}.\n\n") and "I will check." in view.texts[1]


class _Sink(list[object]):
    """A list that forwards every event to the view as it is appended."""

    def __init__(self, view: WorkerColumns) -> None:
        super().__init__()
        self.view = view

    def append(self, event: object) -> None:
        super().append(event)
        self.view.on_event(event)


def test_worker_text_events_read_back_from_json() -> None:
    event = WorkerText(problem_id="p", trace_id=3, worker=1, name="Bob", text=" two", t=0.5)
    assert TypeAdapter(Event).validate_json(event.model_dump_json()) == event


@pytest.mark.anyio
async def test_an_empty_finisher_box_falls_back_to_the_teams_text() -> None:
    # SmolLM2 closed the finisher's box empty ("\boxed{ }") on 7 of 10 GSM8K problems: no answer at all.
    backend = _backend(script_responder(["So 12 apples in all. " * 9, "b " * 50]), finisher=" }. more")
    result = await _run(backend, max_forward_passes=10)
    assert result.answer == "12"
    assert "[1]" in result.traces[0].text  # the step header's number is not taken for the answer


def test_the_system_prompt_shows_no_box_a_small_model_could_copy() -> None:
    assert "\\boxed{" not in HogwildPrompts().system_text(2)
