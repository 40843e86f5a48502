"""Function calling through ``paragen serve`` against a real llama.cpp server (llama-cpp-python's,
SmolLM2 with its ``chatml-function-calling`` template, which writes a named function's arguments
under a JSON grammar): the official openai client sees the server's own calls, passed through
(streamed or not), and majority-N's vote over them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from real_servers import Server, start_llama

from paragen.backends.openai import OpenAIBackend
from paragen.serve import ServeConfig, create_app, serve_in_thread

pytestmark = [pytest.mark.server]

Q = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather of a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
FORCED = {"type": "function", "function": {"name": "get_weather"}}
BODY: dict[str, Any] = {
    "messages": Q,
    "tools": TOOLS,
    "tool_choice": FORCED,
    "max_tokens": 40,
    "temperature": 0,
}


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_llama(
        tmp_path_factory.mktemp("llama") / "llama.log", chat_format="chatml-function-calling"
    )
    yield server
    server.stop()


@pytest.fixture(scope="module")
def served(llama: Server) -> Iterator[str]:
    backend = OpenAIBackend.from_spec(llama.url, model="smollm2", api_key_env=None)
    with serve_in_thread(create_app(backend, ServeConfig(model_names=("smollm2",)))) as url:
        yield url


def direct_call(llama: Server) -> dict[str, Any]:
    """The server's own answer to the same request, asked without paragen."""
    reply = httpx.post(f"{llama.url}/chat/completions", json={"model": "smollm2", **BODY}, timeout=60)
    [made] = reply.json()["choices"][0]["message"]["tool_calls"]
    return dict(made["function"])


def test_a_pass_through_returns_the_servers_call(llama: Server, served: str) -> None:
    with openai.OpenAI(base_url=served, api_key="unused", max_retries=0) as client:
        reply = client.chat.completions.create(model="smollm2", **BODY)
    choice = reply.choices[0]
    [made] = choice.message.tool_calls or []
    assert choice.finish_reason == "tool_calls" and made.type == "function"
    assert made.id.startswith("call_")  # llama-cpp-python's id, not one paragen made up
    assert {"name": made.function.name, "arguments": made.function.arguments} == direct_call(llama)
    assert json.loads(made.function.arguments)["city"]


def test_a_streamed_pass_through_returns_the_servers_call(llama: Server, served: str) -> None:
    with openai.OpenAI(base_url=served, api_key="unused", max_retries=0) as client:
        chunks = list(client.chat.completions.create(model="smollm2", stream=True, **BODY))
    pieces = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    [piece] = pieces
    assert piece.function is not None and piece.id is not None and piece.id.startswith("call_")
    assert {"name": piece.function.name, "arguments": piece.function.arguments} == direct_call(llama)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_majority_votes_over_the_servers_calls(served: str) -> None:
    with openai.OpenAI(base_url=served, api_key="unused", max_retries=0) as client:
        reply = client.chat.completions.create(
            model="majority-3/smollm2", **{**BODY, "temperature": 0.8, "seed": 1}
        )
    choice = reply.choices[0]
    [made] = choice.message.tool_calls or []
    assert choice.finish_reason == "tool_calls" and made.function.name == "get_weather"
    vote = (choice.model_extra or {})["paragen"]["vote"]
    assert vote["rule"] == "hierarchical" and vote["voters"] == 3
    assert vote["votes"] == [{"kind": "tool_calls", "names": ["get_weather"], "count": 3}]
    winning = max(vote["argument_votes"], key=lambda v: v["count"])
    assert winning["calls"] == [
        {
            "name": "get_weather",
            "arguments": json.dumps(
                json.loads(made.function.arguments), sort_keys=True, separators=(",", ":")
            ),
        }
    ]
    assert sum(v["count"] for v in vote["argument_votes"]) == 3
