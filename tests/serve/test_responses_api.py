"""``POST /v1/responses`` with the official openai client's Responses API, streamed and not, a plain
model and a strategy by model name, over the scripted backend on loopback."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from conftest import Serve

from paragen.backends.scripted import ScriptedBackend

ANSWER = "step step step so 7 + 5 = 12. The answer is \\boxed{12}."


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="unused", max_retries=0)


def test_text_input_passes_through_with_usage(serve: Serve, scripted: ScriptedBackend) -> None:
    with serve(scripted) as url, client(url) as api:
        reply = api.responses.create(
            model="scripted", input="What is 7 + 5?", max_output_tokens=64, extra_body={"seed": 1}
        )
    [stream] = scripted.streams
    assert stream.request.messages is not None
    assert [(m.role, m.content) for m in stream.request.messages] == [("user", "What is 7 + 5?")]
    assert stream.request.params.max_tokens == 64
    assert reply.object == "response" and reply.id.startswith("resp_") and reply.status == "completed"
    assert reply.output_text == ANSWER and reply.model == "scripted"
    assert reply.usage is not None
    assert reply.usage.output_tokens == stream.tokens_sent and reply.usage.input_tokens == 5
    assert reply.usage.total_tokens == reply.usage.input_tokens + reply.usage.output_tokens


def test_message_input_with_instructions_and_a_strategy(serve: Serve, scripted: ScriptedBackend) -> None:
    with serve(scripted) as url, client(url) as api:
        reply = api.responses.create(
            model="majority-4/scripted",
            instructions="Answer briefly.",
            input=[{"role": "user", "content": [{"type": "input_text", "text": "What is 7 + 5?"}]}],
            temperature=0.5,
        )
    assert len(scripted.streams) == 4 and {s.request.params.temperature for s in scripted.streams} == {0.5}
    asked = "\n".join(m.content for m in scripted.streams[0].request.messages or ())
    assert "System: Answer briefly.\n\nUser: What is 7 + 5?" in asked  # the conversation as one question
    assert "\\boxed{12}" in reply.output_text
    extension: dict[str, Any] = reply.model_extra["paragen"]  # type: ignore[index]
    assert extension["strategy"] == "majority" and extension["answer"] == "12"
    assert reply.usage is not None and reply.usage.output_tokens == sum(
        s.tokens_sent for s in scripted.streams
    )
    paragen: dict[str, Any] = reply.usage.model_extra["paragen"]  # type: ignore[index]
    assert paragen["num_samples"] == 4


@pytest.mark.parametrize("model", ["scripted", "majority-3/scripted"])
def test_streamed_events_build_the_same_answer(serve: Serve, scripted: ScriptedBackend, model: str) -> None:
    with serve(scripted) as url, client(url) as api:
        events = list(api.responses.create(model=model, input="What is 7 + 5?", stream=True))
        with api.responses.stream(model=model, input="What is 7 + 5?") as helper:
            final = helper.get_final_response()  # the SDK's own accumulator of the events
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    done = events[-1]
    assert done.type == "response.completed" and done.response.usage is not None
    assert "".join(deltas) == done.response.output_text == final.output_text
    assert "\\boxed{12}" in final.output_text
    if model == "scripted":
        assert len(deltas) == scripted.streams[0].tokens_sent  # a pass-through streams its tokens
        assert done.response.usage.output_tokens == len(deltas)
    else:
        assert len(deltas) == 1  # a strategy's answer comes once it is decided


def test_a_cut_answer_is_incomplete_and_bad_requests_are_400(serve: Serve, scripted: ScriptedBackend) -> None:
    with serve(scripted) as url, client(url) as api:
        reply = api.responses.create(model="scripted", input="What is 7 + 5?", max_output_tokens=3)
        assert reply.status == "incomplete" and reply.incomplete_details is not None
        assert reply.incomplete_details.reason == "max_output_tokens"
        for body, says in [
            ({"model": "scripted"}, "input"),
            ({"model": "scripted", "input": "hi", "previous_response_id": "resp_1"}, "stores no responses"),
            ({"model": "scripted", "input": "hi", "tools": [{"type": "web_search"}]}, "tools"),
            ({"model": "nope/scripted", "input": "hi"}, "unknown"),
            ({"model": "scripted", "input": [{"role": "tool", "content": "x"}]}, "input"),
        ]:
            answer = httpx.post(url + "/responses", json=body)
            assert answer.status_code in (400, 404), body
            assert says in answer.json()["error"]["message"], answer.text
