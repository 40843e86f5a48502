"""paragen serve returns a reasoning model's thinking where OpenAI-compatible clients read it
(``reasoning`` and ``reasoning_content`` in chat; a ``reasoning`` item in the Responses API, read
with the official openai client), streamed and not, and counts its tokens in the usage."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from conftest import Serve
from openai.types.responses import ResponseReasoningItem

from paragen.backends.scripted import Script, ScriptedBackend
from paragen.config import Budget
from paragen.serve.responses_api import ResponsesRequest, ResponsesWire
from paragen.serve.routing import Plan
from paragen.types import Problem, SamplingParams, StrategyResult

Q = [{"role": "user", "content": "What is 6 times 7?"}]
THOUGHT = "six sevens are \\boxed{41}? no"  # 5 word tokens
ANSWER = "It is \\boxed{42}"  # 3 word tokens


def _post(url: str, **body: Any) -> httpx.Response:
    response = httpx.post(url + "/chat/completions", json={"messages": Q, **body})
    assert response.status_code == 200, response.text
    return response


def test_a_pass_through_returns_the_servers_thinking_and_counts_it(serve: Serve) -> None:
    with serve(ScriptedBackend([Script(reasoning=THOUGHT, text=ANSWER)])) as url:
        body = _post(url, model="scripted").json()
    message = body["choices"][0]["message"]
    assert (message["content"], message["reasoning"], message["reasoning_content"]) == (
        ANSWER,
        THOUGHT,
        THOUGHT,
    )
    usage = body["usage"]
    assert usage["completion_tokens"] == 8 and usage["completion_tokens_details"] == {"reasoning_tokens": 5}
    assert usage["paragen"]["answer_tokens"] == 3


def test_a_pass_through_streams_the_thinking_apart_from_the_text(serve: Serve) -> None:
    backend = ScriptedBackend([Script(reasoning=THOUGHT, text=ANSWER, token_delay=0.001)])
    with serve(backend) as url:
        lines = _post(url, model="scripted", stream=True, stream_options={"include_usage": True}).text
    chunks = [json.loads(line[6:]) for line in lines.splitlines() if line.startswith("data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("reasoning", "") for d in deltas) == THOUGHT
    assert "".join(d.get("reasoning_content", "") for d in deltas) == THOUGHT
    assert "".join(d.get("content", "") for d in deltas) == ANSWER
    first_content = next(i for i, d in enumerate(deltas) if d.get("content"))
    assert all("reasoning" not in d for d in deltas[first_content:])  # thinking first, then the answer
    assert chunks[-1]["usage"]["completion_tokens_details"] == {"reasoning_tokens": 5}


def test_a_strategy_returns_its_chosen_samples_thinking(serve: Serve) -> None:
    scripts = [Script(text=f"<think> {THOUGHT}</think> {ANSWER}")] * 3
    with serve(ScriptedBackend(scripts)) as url:
        body = _post(url, model="majority-3/scripted").json()
        streamed = _post(url, model="majority-3/scripted", stream=True).text
    message = body["choices"][0]["message"]
    assert message["content"] == " " + ANSWER and message["reasoning_content"] == " " + THOUGHT
    assert body["choices"][0]["paragen"]["answer"] == "42"  # not the box inside the thinking
    assert body["usage"]["completion_tokens_details"] == {"reasoning_tokens": 3 * 6}  # "<think>" too
    deltas = [json.loads(line[6:])["choices"] for line in streamed.splitlines() if line.startswith("data: {")]
    assert any(c and c[0]["delta"].get("reasoning") == " " + THOUGHT for c in deltas)


def test_the_responses_api_counts_reasoning_tokens(serve: Serve) -> None:
    with serve(ScriptedBackend([Script(reasoning=THOUGHT, text=ANSWER)])) as url:
        response = httpx.post(url + "/responses", json={"model": "scripted", "input": "What is 6 times 7?"})
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["output_tokens_details"] == {"reasoning_tokens": 5}


# -- the Responses API: a reasoning item before the message, streamed as reasoning_text events -------


def _responses(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="unused", max_retries=0)


def _thought_and_message(output: list[Any]) -> tuple[Any, Any]:
    thought, message = output
    assert isinstance(thought, ResponseReasoningItem) and thought.type == "reasoning"
    assert thought.id.startswith("rs_") and thought.summary == [] and message.type == "message"
    return thought, message


def test_the_responses_api_returns_the_thinking_as_a_reasoning_item(serve: Serve) -> None:
    with serve(ScriptedBackend([Script(reasoning=THOUGHT, text=ANSWER)])) as url, _responses(url) as api:
        reply = api.responses.create(model="scripted", input="What is 6 times 7?")
    thought, message = _thought_and_message(reply.output)
    assert thought.content is not None and [(c.type, c.text) for c in thought.content] == [
        ("reasoning_text", THOUGHT)
    ]
    assert thought.status == "completed" and message.status == "completed"
    assert reply.output_text == ANSWER  # the SDK reads only the message as the answer
    assert reply.usage is not None and reply.usage.output_tokens == 8
    assert reply.usage.output_tokens_details.reasoning_tokens == 5


def test_the_responses_api_streams_the_thinking_before_the_answer(serve: Serve) -> None:
    backend = ScriptedBackend([Script(reasoning=THOUGHT, text=ANSWER, token_delay=0.001)])
    with serve(backend) as url, _responses(url) as api:
        events: list[Any] = list(
            api.responses.create(model="scripted", input="What is 6 times 7?", stream=True)
        )
        with api.responses.stream(model="scripted", input="What is 6 times 7?") as helper:
            final = helper.get_final_response()  # the SDK's own accumulator of the events
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    thinking = [e for e in events if e.type == "response.reasoning_text.delta"]
    answer = [e for e in events if e.type == "response.output_text.delta"]
    assert len(thinking) == 5 and len(answer) == 3  # a pass-through's pieces, one a token
    assert "".join(e.delta for e in thinking) == THOUGHT and "".join(e.delta for e in answer) == ANSWER
    assert {(e.output_index, e.content_index) for e in thinking} == {(0, 0)}
    assert {e.output_index for e in answer} == {1}
    reasoning_events = [
        "response.output_item.added",
        "response.content_part.added",
        *["response.reasoning_text.delta"] * 5,
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert kinds[2 : 2 + len(reasoning_events)] == reasoning_events  # all of it before the message
    added = [e.item for e in events if e.type == "response.output_item.added"]
    assert [(i.type, i.status) for i in added] == [("reasoning", "in_progress"), ("message", "in_progress")]
    [text_done] = [e for e in events if e.type == "response.reasoning_text.done"]
    assert text_done.text == THOUGHT and text_done.item_id == thinking[0].item_id
    done = events[-1]
    assert done.type == "response.completed" and done.response.usage is not None
    assert done.response.usage.output_tokens_details.reasoning_tokens == 5
    for response in (done.response, final):
        thought, _ = _thought_and_message(response.output)
        assert thought.content is not None and thought.content[0].text == THOUGHT
        assert response.output_text == ANSWER
    assert done.response.output[0].id == thinking[0].item_id


def test_a_strategys_response_carries_its_chosen_samples_thinking(serve: Serve) -> None:
    scripts = [Script(text=f"<think> {THOUGHT}</think> {ANSWER}")] * 3
    with serve(ScriptedBackend(scripts)) as url, _responses(url) as api:
        reply = api.responses.create(model="majority-3/scripted", input="What is 6 times 7?")
        events: list[Any] = list(
            api.responses.create(model="majority-3/scripted", input="What is 6 times 7?", stream=True)
        )
    thought, _ = _thought_and_message(reply.output)
    assert thought.content is not None and thought.content[0].text == " " + THOUGHT
    assert reply.output_text == " " + ANSWER
    assert reply.usage is not None and reply.usage.output_tokens_details.reasoning_tokens == 3 * 6
    deltas = [(e.type, e.delta) for e in events if e.type.endswith(".delta")]
    assert deltas == [  # a strategy's thinking and answer come once it has decided, one piece each
        ("response.reasoning_text.delta", " " + THOUGHT),
        ("response.output_text.delta", " " + ANSWER),
    ]
    assert events[-1].type == "response.completed"
    _thought_and_message(events[-1].response.output)


def test_output_cut_while_thinking_is_an_incomplete_thought_and_an_empty_answer(serve: Serve) -> None:
    with serve(ScriptedBackend([Script(reasoning=THOUGHT, text=ANSWER)])) as url, _responses(url) as api:
        reply = api.responses.create(model="scripted", input="What is 6 times 7?", max_output_tokens=3)
        events: list[Any] = list(
            api.responses.create(
                model="scripted", input="What is 6 times 7?", max_output_tokens=3, stream=True
            )
        )
    for response in (reply, events[-1].response):
        assert response.status == "incomplete"
        thought, message = _thought_and_message(response.output)
        assert thought.content is not None and thought.content[0].text == " ".join(THOUGHT.split()[:3])
        assert (thought.status, message.status, response.output_text) == ("incomplete", "incomplete", "")
        assert response.usage is not None and response.usage.output_tokens_details.reasoning_tokens == 3


def test_an_answer_without_thinking_has_no_reasoning_item(serve: Serve) -> None:
    with serve(ScriptedBackend([Script(text=ANSWER)] * 2)) as url, _responses(url) as api:
        reply = api.responses.create(model="scripted", input="What is 6 times 7?")
        events: list[Any] = list(
            api.responses.create(model="scripted", input="What is 6 times 7?", stream=True)
        )
    assert [item.type for item in reply.output] == ["message"] and reply.output_text == ANSWER
    assert not [e for e in events if "reasoning" in e.type]
    assert [item.type for item in events[-1].response.output] == ["message"]


def test_thinking_that_streams_after_answer_text_gets_an_item_of_its_own() -> None:
    """A server that interleaves thinking and text: each switch closes one item and opens the next,
    and the final output lists the items as they streamed, each with its own pieces."""
    plan = Plan(
        id="resp_1",
        model="scripted",
        strategy_name=None,
        config={},
        samples=1,
        choices=1,
        problem=Problem(question="q"),
        defaults=SamplingParams(),
        budget=Budget(),
    )
    wire = ResponsesWire(plan, ResponsesRequest(model="scripted", input="q"))
    frames = [*wire.opening(), wire.reasoning(0, "a"), wire.text(0, "b"), wire.reasoning(0, "c")]
    frames += wire.closing([StrategyResult(strategy="passthrough", problem_id="p", answer=None, text="b")])
    events = [
        json.loads(line[6:]) for line in b"".join(frames).decode().splitlines() if line.startswith("data: ")
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    final = events[-1]["response"]["output"]
    assert final == done and [(i["type"], i["content"][0]["text"]) for i in final] == [
        ("reasoning", "a"),
        ("message", "b"),
        ("reasoning", "c"),
    ]
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert [e["output_index"] for e in added] == [0, 1, 2]
    assert [i["id"] for i in final] == [e["item"]["id"] for e in added]


# -- a model that thinks inside its text (no server parser): split as it streams -----------------

IN_TEXT = f"<think> {THOUGHT}</think> {ANSWER}"


@pytest.mark.parametrize("text", [IN_TEXT, f"<think> {THOUGHT}", ANSWER])
def test_a_pass_through_streams_thinking_written_in_the_text_apart(serve: Serve, text: str) -> None:
    """What streams is what the answer says, piece by piece: the thought as reasoning deltas, the
    answer as content, neither delimiter anywhere (a thought never closed streams as reasoning)."""
    backend = ScriptedBackend([Script(text=text, token_delay=0.001)])
    with serve(backend) as url:
        whole = _post(url, model="scripted").json()["choices"][0]["message"]
        lines = _post(url, model="scripted", stream=True).text
    deltas = [json.loads(line[6:])["choices"] for line in lines.splitlines() if line.startswith("data: {")]
    pieces = [c[0]["delta"] for c in deltas if c]
    streamed_thought = "".join(d.get("reasoning", "") for d in pieces)
    streamed_answer = "".join(d.get("content") or "" for d in pieces)
    assert (streamed_thought, streamed_answer) == (whole.get("reasoning") or "", whole["content"] or "")
    assert "<think>" not in streamed_thought + streamed_answer and "</think>" not in streamed_answer
    assert streamed_thought.strip() == (THOUGHT if "<think>" in text else "")
    assert sum(1 for d in pieces if d.get("reasoning")) > 1 or "<think>" not in text  # as it streams


def test_the_responses_api_streams_thinking_written_in_the_text_as_a_reasoning_item(serve: Serve) -> None:
    backend = ScriptedBackend([Script(text=IN_TEXT, token_delay=0.001)])
    with serve(backend) as url, _responses(url) as api:
        events: list[Any] = list(
            api.responses.create(model="scripted", input="What is 6 times 7?", stream=True)
        )
    thinking = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    answer = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert (thinking, answer) == (" " + THOUGHT, " " + ANSWER)
    thought, _ = _thought_and_message(events[-1].response.output)
    assert thought.content is not None and thought.content[0].text == thinking
