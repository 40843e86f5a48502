"""paragen serve returns a reasoning model's thinking where OpenAI-compatible clients read it
(``reasoning`` and ``reasoning_content``), streamed and not, and counts its tokens in the usage."""

from __future__ import annotations

import json
from typing import Any

import httpx
from conftest import Serve

from paragen.backends.scripted import Script, ScriptedBackend

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
