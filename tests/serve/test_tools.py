"""Function calling through paragen serve, on the scripted backend: a pass-through forwards the
tools and returns the backend's calls unchanged; majority-N votes over the calls (exact cases)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

import httpx
import openai
import pytest
from conftest import Serve
from openai.types.chat import ChatCompletionMessageFunctionToolCall

from paragen.backends.base import Capabilities
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.types import GenerateRequest
from strategies.tool_vote import canonical_arguments

Q = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
    },
]
CHOICE = {"type": "function", "function": {"name": "get_weather"}}
# The openai client's parameters are TypedDicts; plain dicts (also sent with httpx) go in as they are.
TOOLS_ARG: Any = TOOLS
Q_ARG: Any = Q


def call(name: str, arguments: str, call_id: str = "call_1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def scripts(*replies: dict[str, Any] | str) -> list[Script]:
    """One Script per sample, in sample order: a call (its dict) or a text reply."""
    return [
        Script(text=r) if isinstance(r, str) else Script(text="", tool_calls=[r], token_delay=0.001)
        for r in replies
    ]


def by_sample(table: Sequence[Script]) -> ScriptedBackend:
    """Sample i gets table[i], whatever order the samples' requests arrive in."""

    def respond(request: GenerateRequest, index: int) -> Script:
        return table[int(request.request_id.rsplit("-", 1)[1]) if request.n == 1 else index]

    return ScriptedBackend(respond)


def test_a_pass_through_forwards_the_tools_and_returns_the_call(serve: Serve) -> None:
    backend = ScriptedBackend(scripts(call("get_weather", '{"city": "Paris"}', "call_abc")))
    with serve(backend) as url, openai.OpenAI(base_url=url, api_key="unused", max_retries=0) as client:
        reply = client.chat.completions.create(
            model="scripted",
            messages=Q_ARG,
            tools=TOOLS_ARG,
            tool_choice=cast(Any, CHOICE),
            parallel_tool_calls=False,
        )
    sent = backend.streams[0].request.tools
    assert sent is not None and list(sent.tools) == TOOLS and sent.tool_choice == CHOICE
    assert sent.parallel_tool_calls is False
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [made] = choice.message.tool_calls or []
    assert isinstance(made, ChatCompletionMessageFunctionToolCall)
    assert made.id == "call_abc" and made.function.name == "get_weather"
    assert made.function.arguments == '{"city": "Paris"}'


def test_a_streamed_pass_through_returns_the_call(serve: Serve) -> None:
    backend = ScriptedBackend(scripts(call("get_weather", '{"city": "Paris"}', "call_abc")))
    with serve(backend) as url, openai.OpenAI(base_url=url, api_key="unused", max_retries=0) as client:
        chunks = list(
            client.chat.completions.create(model="scripted", messages=Q_ARG, tools=TOOLS_ARG, stream=True)
        )
    pieces = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert [(p.index, p.id, p.function.name, p.function.arguments) for p in pieces if p.function] == [
        (0, "call_abc", "get_weather", '{"city": "Paris"}')
    ]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def vote(serve: Serve, table: Sequence[Script], rule: str | None = None, **body: Any) -> dict[str, Any]:
    paragen = {} if rule is None else {"tool_vote": rule}
    with serve(by_sample(table)) as url:
        request = {"model": f"majority-{len(table)}/scripted", "messages": Q, "tools": TOOLS, **body}
        response = httpx.post(url + "/chat/completions", json={**request, "paragen": paragen})
    assert response.status_code == 200, response.text
    choice: dict[str, Any] = response.json()["choices"][0]
    return choice


PARIS, LONDON = '{"city": "Paris"}', '{"city": "London"}'


def test_arguments_in_another_key_order_are_the_same_vote(serve: Serve) -> None:
    a = call("f_two", '{"a": 1, "b": [1, 2]}', "call_first")
    table = scripts(a, call("f_two", '{ "b":[1,2],"a":1 }'), call("get_time", "{}"))
    choice = vote(serve, table, "arguments")
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"] == [a]  # the first sample that cast the winning ballot
    counts = choice["paragen"]["vote"]
    assert counts["rule"] == "arguments" and counts["voters"] == 3 and counts["winner"] == 0
    assert [v["count"] for v in counts["votes"]] == [2, 1]
    assert counts["votes"][0]["calls"] == [{"name": "f_two", "arguments": '{"a":1,"b":[1,2]}'}]


def test_rules_differ_where_names_agree_and_arguments_do_not(serve: Serve) -> None:
    # get_weather 3 times (Paris, London, London), get_time twice.
    table = scripts(
        call("get_weather", PARIS), call("get_time", "{}"), call("get_weather", LONDON),
        call("get_time", "{}"), call("get_weather", LONDON),
    )  # fmt: skip
    by_name = vote(serve, table, "name")
    assert json.loads(by_name["message"]["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    assert [v["count"] for v in by_name["paragen"]["vote"]["votes"]] == [3, 2]
    hierarchical = vote(serve, table)  # the server's default rule
    assert json.loads(hierarchical["message"]["tool_calls"][0]["function"]["arguments"]) == {"city": "London"}
    counts = hierarchical["paragen"]["vote"]
    assert counts["rule"] == "hierarchical" and [v["count"] for v in counts["argument_votes"]] == [1, 2]
    by_arguments = vote(serve, table, "arguments")  # get_time's 2 ties London's 2: the first cast wins
    assert by_arguments["message"]["tool_calls"][0]["function"]["name"] == "get_time"


def test_text_can_win_the_vote(serve: Serve) -> None:
    table = scripts("It is sunny.", call("get_weather", PARIS), "It rains.")
    choice = vote(serve, table)
    assert choice["finish_reason"] == "stop" and choice["message"] == {
        "role": "assistant",
        "content": "It is sunny.",
    }
    counts = choice["paragen"]["vote"]
    assert counts["votes"] == [
        {"kind": "text", "count": 2},
        {"kind": "tool_calls", "names": ["get_weather"], "count": 1},
    ]


def test_a_tie_goes_to_the_ballot_first_cast(serve: Serve) -> None:
    choice = vote(serve, scripts(call("get_time", "{}"), "Let me check.", call("get_weather", PARIS)), "name")
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "get_time"
    assert [v["count"] for v in choice["paragen"]["vote"]["votes"]] == [1, 1, 1]


def test_a_streamed_vote_sends_the_winning_call(serve: Serve) -> None:
    table = scripts(call("get_time", "{}"), call("get_weather", PARIS, "call_w"), call("get_weather", PARIS))
    with (
        serve(by_sample(table)) as url,
        openai.OpenAI(base_url=url, api_key="unused", max_retries=0) as client,
    ):
        chunks = list(
            client.chat.completions.create(
                model="majority-3/scripted", messages=Q_ARG, tools=TOOLS_ARG, stream=True
            )
        )
    pieces = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert [(p.id, p.function.name) for p in pieces if p.function] == [("call_w", "get_weather")]
    last = chunks[-1].choices[0]
    assert last.finish_reason == "tool_calls"
    assert (last.model_extra or {})["paragen"]["vote"]["votes"][1]["count"] == 2


def test_a_backend_without_tools_refuses_them(serve: Serve) -> None:
    backend = ScriptedBackend(["hello"], capabilities=Capabilities())
    with serve(backend) as url:
        response = httpx.post(
            url + "/chat/completions", json={"model": "scripted", "messages": Q, "tools": TOOLS}
        )
    assert response.status_code == 400 and "does not take tools" in response.json()["error"]["message"]
    assert backend.calls == 0


@pytest.mark.parametrize("rule", ["bogus"])
def test_an_unknown_rule_is_a_400(serve: Serve, rule: str) -> None:
    with serve(by_sample(scripts("x"))) as url:
        body = {"model": "majority-1/scripted", "messages": Q, "tools": TOOLS, "paragen": {"tool_vote": rule}}
        response = httpx.post(url + "/chat/completions", json=body)
    assert response.status_code == 400 and "paragen.tool_vote" in response.json()["error"]["message"]


def test_arguments_compare_as_canonical_json() -> None:
    assert canonical_arguments('{ "b": 1, "a": [1, 2] }') == '{"a":[1,2],"b":1}'
    assert canonical_arguments(" not json ") == "not json"
