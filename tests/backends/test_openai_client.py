"""The OpenAI-compatible client against a fake server (httpx.MockTransport): streaming, errors, retries."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import anyio
import httpx
import pytest
from openai_fakes import Event, FakeServer, chat_chunk, chunk, usage_chunk

from paragen.backends.base import generate
from paragen.backends.openai import OpenAIBackend
from paragen.errors import (
    BackendAuthError,
    BackendConnectionError,
    BackendHTTPError,
    BackendProtocolError,
    BackendTimeoutError,
    ConfigError,
)
from paragen.types import ChatMessage, GenerateRequest, SamplingParams

pytestmark = pytest.mark.anyio


def make(server: FakeServer, **options: Any) -> OpenAIBackend:
    options.setdefault("backoff", 0.01)
    options.setdefault("api_key_env", None)
    return OpenAIBackend.from_spec("http://fake/v1", transport=server.transport, **options)


def error(status: int, message: str, **headers: str) -> httpx.Response:
    return httpx.Response(status, json={"error": {"message": message}}, headers=headers)


async def test_streams_completions_with_final_usage(server: FakeServer) -> None:
    server.replies.append(
        lambda r: server.sse(
            [chunk("The"), chunk(" answer"), chunk(" is 4", finish="stop"), usage_chunk(6, 4, 2), "[DONE]"]
        )
    )
    backend = make(server)
    request = GenerateRequest(
        prompt="2+2?", params=SamplingParams(max_tokens=5, temperature=0.0, stop=("\n",), seed=3)
    )
    async with backend.stream(request) as stream:
        texts = [d.text async for d in stream]
        assert (stream.usage.prompt_tokens, stream.usage.completion_tokens) == (6, 4)
        assert (stream.usage.cached_prompt_tokens, stream.usage.source) == (2, "server")
    assert texts == ["The", " answer", " is 4"]
    [models, sent] = server.requests
    assert models.url == "http://fake/v1/models" and sent.url == "http://fake/v1/completions"
    assert server.bodies[0] == {
        "model": "m",
        "prompt": "2+2?",
        "max_tokens": 5,
        "temperature": 0.0,
        "top_p": 1.0,
        "stop": ["\n"],
        "seed": 3,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    assert sent.headers["accept"] == "text/event-stream"
    await backend.aclose()


async def test_chat_continue_final(server: FakeServer) -> None:
    server.replies.append(lambda r: server.sse([chat_chunk(""), chat_chunk(" 12", finish="stop"), "[DONE]"]))
    messages = (ChatMessage(role="user", content="7+5?"), ChatMessage(role="assistant", content="It is"))
    [completion] = await generate(
        make(server, model="qwen"), GenerateRequest(messages=messages, continue_final=True)
    )
    assert (completion.text, completion.finish_reason) == (" 12", "stop")
    body = server.bodies[0]
    assert server.generation_requests()[0].url.path == "/v1/chat/completions"
    assert (
        body["model"] == "qwen"
        and body["continue_final_message"] is True
        and body["add_generation_prompt"] is False
    )
    assert body["messages"][-1] == {"role": "assistant", "content": "It is"}


async def test_native_n_interleaves_choices(server: FakeServer) -> None:
    events = [
        chunk("a", index=0),
        chunk("b", index=1),
        chunk("c", index=1, finish="length"),
        chunk("d", index=0, finish="stop"),
    ]
    server.replies.append(lambda r: server.sse([*events, usage_chunk(2, 4), "[DONE]"]))
    backend = make(server)
    assert (await backend.probe()).native_n
    completions = await generate(backend, GenerateRequest(prompt="x", n=2))
    assert [(c.text, c.finish_reason) for c in completions] == [("ad", "stop"), ("bc", "length")]
    assert server.bodies[0]["n"] == 2


async def test_llama_cpp_has_no_native_n(server: FakeServer) -> None:
    server.owned_by = "me"  # llama-cpp-python's server
    backend = make(server)
    assert not backend.capabilities.native_n  # before probing: the safe default
    caps = await backend.probe()
    assert not caps.native_n and not caps.per_choice_abort
    assert (await backend.count_tokens("x"))[1] == "tokenizer"  # llama.cpp's /extras/tokenize
    with pytest.raises(ConfigError, match="n > 1"):
        await generate(backend, GenerateRequest(prompt="x", n=2))


async def test_400_is_not_retried_and_keeps_the_servers_message(server: FakeServer) -> None:
    server.replies.append(lambda r: error(400, "top_k must be -1 or positive"))
    with pytest.raises(BackendHTTPError, match="top_k must be") as info:
        await generate(make(server), GenerateRequest(prompt="x"))
    assert info.value.status_code == 400 and not info.value.retryable
    assert len(server.generation_requests()) == 1


async def test_401_says_check_the_key_and_never_shows_it(server: FakeServer) -> None:
    key = "sk-secret-1234567890"
    server.replies.append(lambda r: error(401, f"Incorrect API key provided: {key}"))
    backend = make(server, api_key=key)
    assert key not in repr(backend.config) and key not in str(backend.config)
    with pytest.raises(BackendAuthError) as info:
        await generate(backend, GenerateRequest(prompt="x"))
    assert "API key" in str(info.value) and key not in str(info.value) and key not in info.value.one_line()
    assert server.generation_requests()[0].headers["authorization"] == f"Bearer {key}"


async def test_key_from_the_environment(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY", "env-key")
    await generate(make(server, api_key_env="MY_KEY"), GenerateRequest(prompt="x"))
    assert server.generation_requests()[0].headers["authorization"] == "Bearer env-key"


async def test_404_names_the_model_problem(server: FakeServer) -> None:
    server.replies.append(lambda r: error(404, "The model `nope` does not exist."))
    with pytest.raises(BackendHTTPError, match="does not exist") as info:
        await generate(make(server, model="nope"), GenerateRequest(prompt="x"))
    assert info.value.status_code == 404 and "model name" in str(info.value)


async def test_500_is_retried_then_succeeds(server: FakeServer) -> None:
    server.replies.extend([lambda r: error(500, "boom"), lambda r: error(502, "bad gateway")])
    [completion] = await generate(make(server), GenerateRequest(prompt="x"))
    assert completion.text == "hi" and len(server.generation_requests()) == 3


async def test_retries_give_up_after_max_retries(server: FakeServer) -> None:
    server.default = lambda r: error(503, "overloaded")
    with pytest.raises(BackendHTTPError, match="overloaded"):
        await generate(make(server, max_retries=2), GenerateRequest(prompt="x"))
    assert len(server.generation_requests()) == 3


async def test_429_waits_for_retry_after(server: FakeServer) -> None:
    server.replies.append(lambda r: error(429, "slow down", **{"Retry-After": "0.3"}))
    start = time.perf_counter()
    [completion] = await generate(make(server), GenerateRequest(prompt="x"))
    assert completion.text == "hi" and time.perf_counter() - start >= 0.3


async def test_connect_errors_are_retried_then_mapped() -> None:
    attempts = []

    def refuse(request: httpx.Request) -> httpx.Response:
        attempts.append(request)
        raise httpx.ConnectError("connection refused")

    backend = OpenAIBackend.from_spec(
        "http://fake/v1", transport=httpx.MockTransport(refuse), model="m", backoff=0.0, max_retries=2
    )
    with pytest.raises(BackendConnectionError, match="refused") as info:
        await generate(backend, GenerateRequest(prompt="x"))
    assert isinstance(info.value.__cause__, httpx.ConnectError) and len(attempts) == 3


async def test_read_timeout_is_mapped(server: FakeServer) -> None:
    server.default = lambda r: server.sse([httpx.ReadTimeout("slow")])
    with pytest.raises(BackendTimeoutError):
        await generate(make(server, max_retries=0), GenerateRequest(prompt="x"))


async def test_reset_after_the_first_token_resumes_from_the_text_seen(server: FakeServer) -> None:
    server.replies.append(lambda r: server.sse([chunk("4"), httpx.ReadError("connection reset by peer")]))
    rest: list[Event] = [chunk(" apples", finish="stop"), usage_chunk(5, 3), "[DONE]"]
    server.replies.append(lambda r: server.sse(rest))
    seen = []
    request = GenerateRequest(prompt="x", params=SamplingParams(max_tokens=10))
    async with make(server).stream(request) as stream:
        async for delta in stream:
            seen.append(delta.text)
        usage = stream.usage
    assert seen == ["4", " apples"]  # nothing repeated, nothing lost
    _, resumed = server.bodies
    assert (resumed["prompt"], resumed["max_tokens"]) == ("x4", 9)
    # One token before the cut (estimated from its chunk), three after it (the server's count).
    assert (usage.prompt_tokens, usage.completion_tokens) == (5, 4)


async def test_a_chat_stream_resumes_as_a_prefilled_reply_where_the_server_continues_one(
    server: FakeServer,
) -> None:
    server.replies.append(lambda r: server.sse([chat_chunk("Four"), httpx.ReadError("reset")]))
    server.replies.append(lambda r: server.sse([chat_chunk(".", finish="stop"), "[DONE]"]))
    messages = (ChatMessage(role="user", content="2+2?"),)
    [completion] = await generate(make(server), GenerateRequest(messages=messages))
    assert completion.text == "Four."
    resumed = server.bodies[1]
    assert resumed["messages"][-1] == {"role": "assistant", "content": "Four"}
    assert resumed["continue_final_message"] is True


async def test_no_resume_where_it_would_repeat_text() -> None:
    llama = FakeServer(owned_by="me")  # llama-cpp-python's chat endpoint cannot continue a prefilled reply
    llama.default = lambda r: llama.sse([chat_chunk("Four"), httpx.ReadError("connection reset by peer")])
    messages = (ChatMessage(role="user", content="2+2?"),)
    with pytest.raises(BackendConnectionError, match="reset"):
        await generate(make(llama), GenerateRequest(messages=messages))
    assert len(llama.generation_requests()) == 1
    vllm = FakeServer()
    vllm.default = lambda r: vllm.sse([chunk("4", index=0), chunk("5", index=1), httpx.ReadError("reset")])
    with pytest.raises(BackendConnectionError):  # n > 1: which choice would go on where is unknown
        await generate(make(vllm), GenerateRequest(prompt="x", n=2))
    assert len(vllm.generation_requests()) == 1


async def test_stream_that_keeps_ending_too_soon_gives_up(server: FakeServer) -> None:
    server.default = lambda r: server.sse([chunk("4")])
    with pytest.raises(BackendConnectionError, match="ended before"):
        await generate(make(server, max_retries=2), GenerateRequest(prompt="x"))
    assert [b["prompt"] for b in server.bodies] == ["x", "x4", "x44"]


async def test_malformed_chunk_is_a_protocol_error(server: FakeServer) -> None:
    server.default = lambda r: server.sse(["{this is not json"])
    with pytest.raises(BackendProtocolError, match="malformed"):
        await generate(make(server), GenerateRequest(prompt="x"))
    assert len(server.generation_requests()) == 1


async def test_not_an_event_stream(server: FakeServer) -> None:
    server.default = lambda r: httpx.Response(200, json={"choices": []})
    with pytest.raises(BackendProtocolError, match="event stream"):
        await generate(make(server), GenerateRequest(prompt="x"))


async def test_early_exit_closes_the_response(server: FakeServer) -> None:
    server.replies.append(lambda r: server.sse([chunk(f"t{i}") for i in range(1000)], delay=0.001))
    backend = make(server)
    async with backend.stream(GenerateRequest(prompt="x")) as stream:
        async for _ in stream:
            break
    [sse] = server.streams
    assert sse.closed and sse.sent < 1000
    assert backend.pool.replicas[0].num_outstanding == 0


async def test_cancellation_closes_the_response(server: FakeServer) -> None:
    server.replies.append(lambda r: server.sse([chunk(f"t{i}") for i in range(1000)], delay=0.01))
    backend = make(server)
    with anyio.move_on_after(0.1):
        await generate(backend, GenerateRequest(prompt="x"))
    assert server.streams[0].closed and backend.pool.replicas[0].num_outstanding == 0


async def test_abort_of_the_only_choice_ends_the_stream(server: FakeServer) -> None:
    server.replies.append(lambda r: server.sse([chunk(f"t{i}") for i in range(100)]))
    async with make(server).stream(GenerateRequest(prompt="x")) as stream:
        seen = []
        async for delta in stream:
            seen.append(delta)
            await stream.abort(0)
    assert len(seen) == 1 and server.streams[0].closed


async def test_sglang_gets_an_explicit_abort(server: FakeServer) -> None:
    server.owned_by = "sglang"
    server.replies.append(lambda r: server.sse([chunk(f"t{i}") for i in range(100)]))
    async with make(server).stream(GenerateRequest(prompt="x")) as stream:
        async for _ in stream:
            break
    rid = server.bodies[0]["rid"]
    [abort] = [r for r in server.requests if r.url.path == "/abort_request"]
    assert abort.url == "http://fake/abort_request" and json.loads(abort.content) == {"rid": rid}
    assert "continuous_usage_stats" not in server.bodies[0]["stream_options"]


async def test_count_tokens_uses_the_servers_tokenizer(server: FakeServer) -> None:
    assert await make(server).count_tokens("hello world") == (7, "tokenizer")
    [tokenize] = [r for r in server.requests if r.url.path == "/tokenize"]
    assert json.loads(tokenize.content)["prompt"] == "hello world"


async def test_count_tokens_estimates_without_a_tokenizer(server: FakeServer) -> None:
    server.owned_by = "openai"
    assert await make(server).count_tokens("hello world!") == (3, "estimate")


def test_bad_specs_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="needs a server URL"):
        OpenAIBackend.from_spec(None)
    with pytest.raises(ConfigError, match="not an http"):
        OpenAIBackend.from_spec("localhost:8000")
    with pytest.raises(ConfigError, match="max_retry"):
        OpenAIBackend.from_spec("http://h/v1", max_retry=3)
    with pytest.raises(ConfigError, match="completions-only"):
        OpenAIBackend.from_spec("http://h/v1", endpoint="completions").stream(
            GenerateRequest(messages=(ChatMessage(role="user", content="hi"),))
        )


async def test_models_lists_nothing_and_no_model_given() -> None:
    transport = httpx.MockTransport(lambda r: httpx.Response(200, json={"data": []}))
    with pytest.raises(ConfigError, match="no model"):
        await OpenAIBackend.from_spec("http://h/v1", transport=transport).probe()


async def test_refused_connection_on_loopback() -> None:
    """A real socket, no server: the error names the URL and keeps httpx's as its cause."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound but not listening: connections are refused
        backend = OpenAIBackend.from_spec(
            f"http://127.0.0.1:{port}/v1", model="m", max_retries=1, backoff=0.0
        )
        with pytest.raises(BackendConnectionError, match=f"127.0.0.1:{port}") as info:
            await generate(backend, GenerateRequest(prompt="x"))
    assert isinstance(info.value.__cause__, httpx.ConnectError)
    await backend.aclose()
