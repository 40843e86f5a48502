"""The OpenAI wire format as plain functions: request bodies and chunk parsing."""

from __future__ import annotations

import json

import pytest

from paragen._tool_calls import merge
from paragen.backends.openai_wire import ChunkParser, WireOptions, build_body, error_message
from paragen.errors import BackendHTTPError, BackendProtocolError
from paragen.types import ChatMessage, GenerateRequest, SamplingParams, ToolOptions, Usage


def test_completions_body_maps_every_sampling_param() -> None:
    params = SamplingParams(
        max_tokens=64, temperature=0.6, top_p=0.95, top_k=20, seed=7, stop=("\n\n",), top_logprobs=5
    )
    request = GenerateRequest(prompt="2+2=", params=params, n=4)
    body = build_body(request, WireOptions("qwen", "completions", kind="vllm", continuous_usage=True))
    assert body == {
        "model": "qwen",
        "prompt": "2+2=",
        "max_tokens": 64,
        "temperature": 0.6,
        "top_p": 0.95,
        "top_k": 20,
        "n": 4,
        "stop": ["\n\n"],
        "seed": 7,
        "logprobs": 5,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }


def test_minimal_body_leaves_optional_fields_out() -> None:
    request = GenerateRequest(prompt="hi", params=SamplingParams(max_tokens=8, temperature=0.0))
    body = build_body(request, WireOptions("m", "completions"))
    assert body == {
        "model": "m",
        "prompt": "hi",
        "max_tokens": 8,
        "temperature": 0.0,
        "top_p": 1.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_chat_body_with_continue_final_and_logprobs() -> None:
    messages = (ChatMessage(role="user", content="Solve"), ChatMessage(role="assistant", content="<think>"))
    params = SamplingParams(max_tokens=16, logprobs=True, top_logprobs=2)
    request = GenerateRequest(messages=messages, params=params, continue_final=True)
    body = build_body(request, WireOptions("m", "chat", kind="vllm"))
    assert body["messages"] == [
        {"role": "user", "content": "Solve"},
        {"role": "assistant", "content": "<think>"},
    ]
    assert body["continue_final_message"] is True
    assert body["add_generation_prompt"] is False
    assert (body["logprobs"], body["top_logprobs"]) == (True, 2)


def test_logprobs_without_alternatives() -> None:
    request = GenerateRequest(prompt="x", params=SamplingParams(logprobs=True))
    assert build_body(request, WireOptions("m", "completions"))["logprobs"] == 0
    chat = build_body(request, WireOptions("m", "chat"))
    assert chat["logprobs"] is True and "top_logprobs" not in chat
    assert chat["messages"] == [{"role": "user", "content": "x"}]
    # llama-cpp-python's chat endpoint sends none without alternatives asked for: one is asked.
    llama = build_body(request, WireOptions("m", "chat", kind="llama_cpp"))
    assert (llama["logprobs"], llama["top_logprobs"]) == (True, 1)


def test_sglang_body_names_the_request() -> None:
    options = WireOptions("m", "completions", kind="sglang", rid="pg-1-ab")
    body = build_body(GenerateRequest(prompt="x"), options)
    assert body["rid"] == "pg-1-ab"


def _payload(choices: list[dict[str, object]], usage: dict[str, int] | None = None) -> str:
    return json.dumps({"choices": choices, "usage": usage})


def test_parser_counts_by_logprobs_then_takes_the_servers_total() -> None:
    usage = Usage()
    parser = ChunkParser("completions", usage)
    logprobs = {
        "tokens": ["a", "b"],
        "token_logprobs": [-0.5, -1.0],
        "top_logprobs": [{"a": -0.5, "z": -2.0}, {"b": -1.0}],
    }
    [delta] = parser.parse(_payload([{"index": 0, "text": "ab", "logprobs": logprobs}]))
    assert (delta.text, delta.num_tokens, delta.logprobs) == ("ab", 2, (-0.5, -1.0))
    assert delta.top_logprobs == ((-0.5, -2.0), (-1.0,))
    assert (usage.completion_tokens, usage.source) == (2, "token_ids")
    assert parser.parse(_payload([], {"prompt_tokens": 5, "completion_tokens": 3})) == []
    assert (usage.prompt_tokens, usage.completion_tokens, usage.source) == (5, 3, "server")


def test_parser_with_continuous_usage_counts_the_increase_per_choice() -> None:
    usage = Usage()
    parser = ChunkParser("chat", usage, num_choices=2)
    role = {"index": 0, "delta": {"role": "assistant", "content": ""}}
    assert parser.parse(_payload([role], {"prompt_tokens": 4, "completion_tokens": 0})) == []
    [a] = parser.parse(
        _payload([{"index": 0, "delta": {"content": "Hel"}}], {"prompt_tokens": 4, "completion_tokens": 2})
    )
    [b] = parser.parse(
        _payload([{"index": 1, "delta": {"content": "Yo"}}], {"prompt_tokens": 4, "completion_tokens": 1})
    )
    [c] = parser.parse(
        _payload(
            [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "length"}], {"completion_tokens": 3}
        )
    )
    assert [(d.index, d.num_tokens) for d in (a, b, c)] == [(0, 2), (1, 1), (0, 1)]
    assert c.finish_reason == "length" and not parser.is_done
    # The server counts the prompt once for the request; paragen once per choice, as vLLM's counter.
    assert (usage.prompt_tokens, usage.completion_tokens) == (8, 4)


def test_parser_estimates_one_token_per_chunk_without_counts() -> None:
    usage = Usage()
    parser = ChunkParser("chat", usage)
    parser.parse(_payload([{"index": 0, "delta": {"content": "one two"}}]))
    [end] = parser.parse(_payload([{"index": 0, "delta": {}, "finish_reason": "stop"}]))
    assert (end.text, end.num_tokens, end.finish_reason) == ("", 0, "stop")
    assert (usage.completion_tokens, usage.source) == (1, "estimate")
    assert parser.is_done


def test_parser_reads_chat_logprobs() -> None:
    parser = ChunkParser("chat", Usage())
    content = [
        {
            "token": "x",
            "logprob": -0.1,
            "top_logprobs": [{"token": "y", "logprob": -3.0}, {"token": "x", "logprob": -0.1}],
        }
    ]
    [delta] = parser.parse(
        _payload([{"index": 0, "delta": {"content": "x"}, "logprobs": {"content": content}}])
    )
    assert delta.logprobs == (-0.1,) and delta.top_logprobs == ((-0.1, -3.0),)


def test_parser_takes_cached_prompt_tokens() -> None:
    usage = Usage()
    ChunkParser("completions", usage).parse(
        json.dumps(
            {
                "choices": [],
                "usage": {
                    "prompt_tokens": 9,
                    "completion_tokens": 0,
                    "prompt_tokens_details": {"cached_tokens": 8},
                },
            }
        )
    )
    assert usage.cached_prompt_tokens == 8


@pytest.mark.parametrize("data", ["{not json", '{"choices": [{"index": "zero"}]}', '{"choices": 3}'])
def test_malformed_chunks_are_protocol_errors(data: str) -> None:
    with pytest.raises(BackendProtocolError, match="malformed"):
        ChunkParser("completions", Usage()).parse(data)


def test_error_inside_the_stream() -> None:
    with pytest.raises(BackendHTTPError, match="out of memory") as info:
        ChunkParser("completions", Usage()).parse('{"error": {"message": "out of memory", "code": 503}}')
    assert info.value.status_code == 503 and info.value.retryable
    with pytest.raises(BackendHTTPError, match="bad request") as info:
        ChunkParser("chat", Usage()).parse('{"object": "error", "message": "bad request", "code": 400}')
    assert info.value.status_code == 400 and not info.value.retryable


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"error": {"message": "bad top_k"}}', "bad top_k"),
        (b'{"object": "error", "message": "model x does not exist"}', "model x does not exist"),
        (b'{"detail": "Not Found"}', "Not Found"),
        (b"<html>oops</html>", "<html>oops</html>"),
    ],
)
def test_error_message_shapes(body: bytes, message: str) -> None:
    assert error_message(body) == message


def test_chat_body_forwards_tools_as_written() -> None:
    tools = ToolOptions(tools=({"type": "function", "function": {"name": "f"}},), tool_choice="required")
    request = GenerateRequest(messages=(ChatMessage(role="user", content="hi"),), tools=tools)
    body = build_body(request, WireOptions(model="m", endpoint="chat"))
    assert body["tools"] == [{"type": "function", "function": {"name": "f"}}]
    assert body["tool_choice"] == "required" and "parallel_tool_calls" not in body


def test_parser_reads_tool_call_pieces_and_merge_joins_them() -> None:
    """llama-cpp-python repeats the id and name on every piece; OpenAI sends them once."""
    parser = ChunkParser("chat", Usage())
    deltas = []
    for arguments in ('{"city"', ': "Paris"}'):
        piece = {
            "index": 0,
            "id": "call_1",
            "type": "function",
            "function": {"name": "w", "arguments": arguments},
        }
        deltas += parser.parse(
            json.dumps({"choices": [{"index": 0, "delta": {"content": None, "tool_calls": [piece]}}]})
        )
    deltas += parser.parse(
        json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    )
    assert deltas[-1].finish_reason == "tool_calls" and parser.usage.completion_tokens == 2
    pieces = [p for d in deltas for p in d.tool_calls or ()]
    assert merge(pieces) == [
        {"id": "call_1", "type": "function", "function": {"name": "w", "arguments": '{"city": "Paris"}'}}
    ]
