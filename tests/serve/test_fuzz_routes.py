"""A seeded fuzz of every route of ``paragen serve``: malformed bodies, wrong types in every field,
deep nesting, stray bytes, wrong methods. No answer may be a 5xx, every error has OpenAI's shape
with one line, and the server is still healthy afterwards."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import serving

from paragen.backends.scripted import Script, ScriptedBackend
from paragen.types import GenerateRequest

CHAT = {
    "model": "majority-2/scripted",
    "messages": [{"role": "user", "content": "What is 7 + 5?"}],
    "max_tokens": 8,
    "temperature": 0.5,
    "stream": False,
    "stream_options": {"include_usage": True},
    "n": 1,
    "stop": ["\n\n"],
    "paragen": {"strategy": None, "config": {}, "budget": {"max_total_tokens": 100}, "events": False},
}
COMPLETION = {"model": "scripted", "prompt": "7 + 5 =", "max_tokens": 8, "seed": 1, "stream": False}
RESPONSES = {
    "model": "ffs-2/scripted",
    "input": [{"role": "user", "content": [{"type": "input_text", "text": "What is 7 + 5?"}]}],
    "instructions": "Be brief.",
    "max_output_tokens": 8,
    "text": {"format": {"type": "text"}},
    "stream": False,
}
POSTS = {"/chat/completions": CHAT, "/completions": COMPLETION, "/responses": RESPONSES}
GETS = ("/models", "/../metrics", "/../health")  # /metrics and /health are served at the root

# Values of every JSON type, and the shapes that broke handlers before: huge, negative, deep.
ODD_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    2**70,
    1.5,
    float("nan"),
    "",
    "16",
    "yes",
    "x" * 5000,
    "\u0000\ud7ff",
    [],
    [1, "a", None],
    {},
    {"type": "json"},
    {"format": "json"},
    {"nosuch": 1},
]


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _mutate(body: dict[str, Any], rng: random.Random) -> dict[str, Any] | bytes:
    """One malformed variant of a valid body."""
    mutated: dict[str, Any] = json.loads(json.dumps(body))
    roll = rng.random()
    if roll < 0.05:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    if roll < 0.1:
        return b"[" * rng.choice([100, 1000, 100_000]) + b"]" * rng.choice([0, 5])
    if roll < 0.15:  # built as text: json.dumps itself cannot nest this deep
        mutated[rng.choice(list(mutated))] = "DEEP"
        depth = rng.choice([70, 500, 5000])
        return json.dumps(mutated).replace('"DEEP"', "[" * depth + "1" + "]" * depth).encode()
    if roll < 0.2:
        mutated.pop(rng.choice(list(mutated)))
        return mutated
    if roll < 0.25:
        mutated[f"unknown_{rng.randrange(100)}"] = rng.choice(ODD_VALUES)
        return mutated
    # A field (or a field of a nested object) set to a value of another type.
    target = mutated
    key = rng.choice(list(target))
    while isinstance(target[key], dict) and target[key] and rng.random() < 0.5:
        target = target[key]
        key = rng.choice(list(target))
    if (
        isinstance(target[key], list)
        and target[key]
        and isinstance(target[key][0], dict)
        and rng.random() < 0.5
    ):
        item = target[key][0]
        item[rng.choice(list(item))] = rng.choice(ODD_VALUES)
    else:
        target[key] = rng.choice(ODD_VALUES)
    return mutated


def _cases(count: int, seed: int) -> Iterator[tuple[str, str, bytes | None]]:
    rng = random.Random(seed)
    for _ in range(count):
        if rng.random() < 0.08:  # a GET route with a body or the wrong method, or a POST route read
            path = rng.choice([*GETS, *POSTS])
            yield rng.choice(["GET", "POST", "PUT", "DELETE"]), path, b"{}"
            continue
        path = rng.choice(list(POSTS))
        body = _mutate(POSTS[path], rng)
        content = body if isinstance(body, bytes) else json.dumps(body, allow_nan=True).encode()
        yield "POST", path, content


def instant(request: GenerateRequest, index: int) -> Script:
    """An answer at once: the fuzz spends its time on the handlers, not on generation."""
    return Script(text="7 + 5 = 12, so \\boxed{12}.")


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serving(ScriptedBackend(instant), max_body_bytes=2**20) as base:
        yield base


def test_no_route_answers_5xx_to_malformed_input(url: str) -> None:
    statuses: dict[int, int] = {}
    with httpx.Client(base_url=url, timeout=30) as client:
        for method, path, content in _cases(550, seed=47):
            response = client.request(
                method, path, content=content, headers={"Content-Type": "application/json"}
            )
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            assert response.status_code < 500, (method, path, (content or b"")[:300], response.text[:300])
            if response.status_code >= 400:
                error = response.json()["error"]
                assert error["message"] and "\n" not in error["message"] and "Traceback" not in response.text
        health = client.get("/../health")
    assert health.status_code == 200 and health.json()["runs_running"] == 0
    # The fuzz reached the handlers' validation, not only the JSON parser, and some bodies stayed valid.
    assert statuses.get(400, 0) >= 300 and statuses.get(200, 0) >= 10, statuses


@pytest.mark.parametrize("path", list(POSTS))
@pytest.mark.parametrize(
    ("field", "value"),
    [("stream", "yes"), ("max_tokens", "16"), ("max_output_tokens", "16"), ("temperature", "0.5")],
)
def test_a_string_is_no_number_or_bool(url: str, path: str, field: str, value: str) -> None:
    body = dict(POSTS[path])
    if field.startswith("max_"):
        field = "max_output_tokens" if path == "/responses" else "max_tokens"
    body[field] = value
    response = httpx.post(url + path, json=body, timeout=30)
    assert response.status_code == 400 and response.json()["error"]["param"] == field, response.text


@pytest.mark.parametrize("text", [{"format": "json"}, ["text"], 3, True, {"format": {"type": "json_schema"}}])
def test_responses_text_field_of_any_shape_is_a_400(url: str, text: Any) -> None:
    response = httpx.post(url + "/responses", json={**RESPONSES, "text": text}, timeout=30)
    error = response.json()["error"]
    assert response.status_code == 400, response.text
    assert (error["param"] or "").startswith("text") or "text.format" in error["message"], error


@pytest.mark.parametrize("path", list(POSTS))
def test_a_body_nested_too_deep_is_a_400(url: str, path: str) -> None:
    for content in (
        b"[" * 100_000 + b"]" * 100_000,
        json.dumps({**POSTS[path], "user": _deep(200)}).encode(),
    ):
        response = httpx.post(url + path, content=content, timeout=30)
        assert response.status_code == 400 and "nests deeper" in response.json()["error"]["message"]
