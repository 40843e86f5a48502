"""Table-driven: bad requests each get the right 4xx and one clear OpenAI-style error; never a 500,
never a traceback, and the backend is never asked for anything."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import Serve, serving

from paragen.backends.scripted import Script, ScriptedBackend

Q = [{"role": "user", "content": "What is 7 + 5?"}]
CHAT = "/chat/completions"


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "scripted", "messages": Q, **fields}


# (name, path, body (dict, or raw bytes), expected status, text the error message must contain)
CASES: list[tuple[str, str, Any, int, str]] = [
    ("not JSON", CHAT, b"{model: scripted", 400, "not valid JSON"),
    ("not UTF-8", CHAT, b'{"model": "\xff"}', 400, "not valid JSON"),
    ("JSON but not an object", CHAT, b"[1, 2]", 400, "must be a JSON object"),
    ("no model", CHAT, {"messages": Q}, 400, "model: Field required"),
    ("no messages", CHAT, {"model": "scripted"}, 400, "messages: Field required"),
    ("empty messages", CHAT, chat(messages=[]), 400, "messages: List should have at least 1 item"),
    ("bad role", CHAT, chat(messages=[{"role": "robot", "content": "hi"}]), 400, "messages.0.role"),
    ("content not text", CHAT, chat(messages=[{"role": "user", "content": 42}]), 400, "messages.0.content"),
    (
        "blank question",
        CHAT,
        chat(messages=[{"role": "user", "content": "  "}]),
        400,
        "the question is empty",
    ),
    ("unknown model", CHAT, chat(model="gpt-9"), 404, "unknown model 'gpt-9'"),
    ("unknown strategy", CHAT, chat(model="nosuch-4/scripted"), 404, "unknown strategy 'nosuch'"),
    ("strategy over unknown model", CHAT, chat(model="majority-4/gpt-9"), 404, "model 'gpt-9' is not served"),
    ("n zero in name", CHAT, chat(model="majority-0/scripted"), 400, "bad n '0'"),
    ("n not a number in name", CHAT, chat(model="majority-x/scripted"), 400, "bad n 'x'"),
    (
        "unknown strategy in field",
        CHAT,
        chat(paragen={"strategy": "nosuch"}),
        400,
        "unknown strategy 'nosuch'",
    ),
    ("n negative in field", CHAT, chat(paragen={"strategy": "majority", "n": -1}), 400, "paragen.n"),
    ("n text in field", CHAT, chat(paragen={"strategy": "majority", "n": "abc"}), 400, "valid integer"),
    ("n on a single sample", CHAT, chat(model="single-4/scripted"), 400, "strategy 'single': n"),
    ("n past the server's limit", CHAT, chat(model="majority-65/scripted"), 400, "at most 64 per request"),
    ("choices times n past it", CHAT, chat(model="majority-40/scripted", n=2), 400, "asks for 80 samples"),
    (
        "unknown config field",
        CHAT,
        chat(model="ffs/scripted", paragen={"config": {"nosuch": 1}}),
        400,
        "nosuch",
    ),
    ("config of the wrong type", CHAT, chat(model="ffs/scripted", paragen={"config": {"k": "x"}}), 400, "k:"),
    ("config without strategy", CHAT, chat(paragen={"config": {"k": 2}}), 400, "need a strategy"),
    (  # a client must not make the server load a model or call a URL of its choosing
        "verifier the server does not serve",
        CHAT,
        chat(
            model="weighted_bon-2/scripted", paragen={"config": {"verifier": "vllm-server:http://internal"}}
        ),
        400,
        "scorer 'vllm-server:http://internal' is not served here",
    ),
    (
        "two strategies",
        CHAT,
        chat(model="ffs/scripted", paragen={"strategy": "majority"}),
        400,
        "names two values of strategy (",
    ),
    ("unknown field", CHAT, chat(temprature=0.5), 400, "unrecognized request argument: temprature"),
    ("negative temperature", CHAT, chat(temperature=-1), 400, "temperature"),
    (
        "NaN temperature",
        CHAT,
        b'{"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "temperature": NaN}',
        400,
        "temperature",
    ),
    ("negative seed", CHAT, chat(seed=-5), 400, "seed: Input should be greater than or equal to 0"),
    ("max_tokens zero", CHAT, chat(max_tokens=0), 400, "max_tokens"),
    ("empty stop string", CHAT, chat(stop=[""]), 400, "stop strings must be non-empty"),
    ("logprobs", CHAT, chat(logprobs=True), 400, "logprobs are not supported"),
    (
        "tools with ffs",
        CHAT,
        chat(model="ffs-2/scripted", tools=[{"type": "function"}]),
        400,
        "not with strategy 'ffs'",
    ),
    ("tool_choice without tools", CHAT, chat(tool_choice="required"), 400, "tool_choice needs tools"),
    ("tools not objects", CHAT, chat(tools=["f"]), 400, "tools.0"),
    (
        "prompt too long",
        CHAT,
        chat(messages=[{"role": "user", "content": " ".join(["word"] * 300)}]),
        400,
        "300 tokens",
    ),
    ("completions without prompt", "/completions", {"model": "scripted"}, 400, "prompt: Field required"),
    ("completions with a list", "/completions", {"model": "scripted", "prompt": ["a", "b"]}, 400, "prompt"),
    ("body too large", CHAT, b"x" * 70_000, 413, "larger than this server takes"),
    ("no such route", "/embeddings", chat(), 404, "no such route"),
]


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, ScriptedBackend]]:
    backend = ScriptedBackend(["The answer is \\boxed{12}."])
    with serving(backend, max_prompt_tokens=256, max_body_bytes=65_536) as url:
        yield url, backend


@pytest.mark.parametrize(("name", "path", "body", "status", "message"), CASES, ids=[c[0] for c in CASES])
def test_bad_request(
    server: tuple[str, ScriptedBackend], name: str, path: str, body: Any, status: int, message: str
) -> None:
    url, backend = server
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = httpx.post(url + path, content=content, headers={"Content-Type": "application/json"})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert message in error["message"]
    assert set(error) == {"message", "type", "param", "code"}
    assert "Traceback" not in response.text and "\n" not in error["message"]
    if status == 429:
        assert response.headers["Retry-After"] == "1"
    assert backend.calls == 0  # refused before anything ran


def test_wrong_method_is_405(server: tuple[str, ScriptedBackend]) -> None:
    url, _ = server
    response = httpx.get(url + CHAT)
    assert response.status_code == 405 and response.json()["error"]["code"] == "method_not_allowed"


def test_runs_past_the_limit_get_429(serve: Serve) -> None:
    backend = ScriptedBackend([Script(text="tok " * 200, token_delay=0.01)])  # a run of about 2 s
    with serve(backend, max_runs=1) as url:
        with httpx.stream("POST", url + CHAT, json=chat(stream=True)) as first:
            lines = first.iter_lines()  # kept: dropping the iterator would close the connection
            next(lines)  # the first run has started
            second = httpx.post(url + CHAT, json=chat())
        health = httpx.get(url.removesuffix("/v1") + "/health").json()
    assert second.status_code == 429 and second.headers["Retry-After"] == "1"
    assert "running 1 of at most 1 runs" in second.json()["error"]["message"]
    assert health["rejected_total"] == 1


def test_a_listed_scorer_that_cannot_be_opened_is_a_502(serve: Serve) -> None:
    backend = ScriptedBackend(["The answer is \\boxed{12}."])
    down = "vllm-server:http://127.0.0.1:9?timeout=2"  # the discard port: nothing listens there
    body = chat(model="weighted_bon-2/scripted", paragen={"config": {"verifier": down}})
    with serve(backend, scorers=(down,)) as url:
        response = httpx.post(url + CHAT, json=body)
    assert response.status_code == 502, response.text  # the server's fault, not the client's
    assert "cannot reach vLLM at http://127.0.0.1:9" in response.json()["error"]["message"]
    assert backend.calls == 0  # opened before any sample
