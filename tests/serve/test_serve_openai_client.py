"""The official openai client (sync and async, streamed and not) against ``paragen serve`` on loopback,
over the scripted backend: strategies chosen by model name or by the ``paragen`` field."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from conftest import Serve
from openai.types.chat import ChatCompletionMessageParam

from paragen.backends.scripted import Script, ScriptedBackend
from paragen.types import GenerateRequest

QUESTION: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is 7 + 5?"}]


def sync_client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="unused", max_retries=0)


def test_plain_model_passes_through_as_one_sample(serve: Serve, scripted: ScriptedBackend) -> None:
    with serve(scripted) as url, sync_client(url) as client:
        reply = client.chat.completions.create(model="scripted", messages=QUESTION, max_tokens=64, seed=1)
    [stream] = scripted.streams
    assert stream.request.messages is not None
    assert [m.content for m in stream.request.messages] == ["What is 7 + 5?"]  # the client's own messages
    assert stream.request.params.seed == 1 and stream.request.params.max_tokens == 64
    assert reply.choices[0].message.content == "step step step so 7 + 5 = 12. The answer is \\boxed{12}."
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None and reply.usage.completion_tokens == stream.tokens_sent
    assert reply.usage.prompt_tokens == 5  # "What is 7 + 5?" in the scripted backend's word tokens
    assert reply.model == "scripted" and reply.object == "chat.completion"


def test_strategy_from_model_name_reports_its_accounting(serve: Serve, scripted: ScriptedBackend) -> None:
    with serve(scripted) as url, sync_client(url) as client:
        reply = client.chat.completions.create(
            model="majority-4/scripted", messages=QUESTION, temperature=0.5, seed=0
        )
    assert len(scripted.streams) == 4  # four samples of the one question
    assert {s.request.params.temperature for s in scripted.streams} == {0.5}  # the request's defaults
    assert reply.choices[0].message.content is not None and "\\boxed{12}" in reply.choices[0].message.content
    extension: dict[str, Any] = reply.choices[0].model_extra["paragen"]  # type: ignore[index]
    assert extension["strategy"] == "majority" and extension["answer"] == "12"
    usage = reply.usage
    assert usage is not None
    assert usage.completion_tokens == sum(s.tokens_sent for s in scripted.streams)
    extra: dict[str, Any] = usage.model_extra["paragen"]  # type: ignore[index]
    assert extra["num_samples"] == 4 and extra["wasted_tokens"] == 0
    assert extra["sequential_tokens"] == max(s.tokens_sent for s in scripted.streams)
    assert extra["count_sources"] == ["tokenizer"] and extra["latency_s"] > 0


def spread(request: GenerateRequest, index: int) -> Script:
    """Sample i (its seed: the fan-out gives sample i seed + i) takes 4 + 6 i tokens at 10 ms each."""
    words = " ".join(["step"] * 6 * ((request.params.seed or 0) + index))
    return Script(text=f"{words} The answer is \\boxed{{12}}.", token_delay=0.01)


def test_strategy_from_the_paragen_field_with_the_whole_result(serve: Serve) -> None:
    backend = ScriptedBackend(spread)
    body = {"paragen": {"strategy": "ffs", "n": 3, "config": {"temperature": None}, "include_result": True}}
    with serve(backend) as url, sync_client(url) as client:
        reply = client.chat.completions.create(model="scripted", messages=QUESTION, seed=0, extra_body=body)
    extension: dict[str, Any] = reply.choices[0].model_extra["paragen"]  # type: ignore[index]
    result = extension["result"]
    assert result["strategy"] == "ffs" and result["config"]["n"] == 3
    assert len(result["traces"]) == 3
    statuses = sorted(t["status"] for t in result["traces"])
    assert statuses == ["cancelled", "cancelled", "ok"]  # the first finisher won, the others were stopped
    assert reply.usage is not None
    assert reply.usage.completion_tokens == sum(t["completion_tokens"] for t in result["traces"])


def test_sync_stream_gives_chunks_and_usage(serve: Serve, scripted: ScriptedBackend) -> None:
    with serve(scripted) as url, sync_client(url) as client:
        chunks = list(
            client.chat.completions.create(
                model="scripted", messages=QUESTION, stream=True, stream_options={"include_usage": True}
            )
        )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "step step so 7 + 5 = 12. The answer is \\boxed{12}."
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 5  # token by token
    assert (
        chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == scripted.streams[0].tokens_sent
    )
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


@pytest.mark.anyio
# On trio: the openai client stops reading its SSE generators (its own, and those of httpx2 under
# them) at [DONE] and leaves them to the garbage collector, which trio reports as a ResourceWarning.
@pytest.mark.filterwarnings("ignore:Async generator '(openai\\._streaming|httpx2)\\.:ResourceWarning")
async def test_async_client_streamed_and_not(serve: Serve, scripted: ScriptedBackend) -> None:
    with serve(scripted) as url:
        client = openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0)
        reply = await client.chat.completions.create(model="ffs-4/scripted", messages=QUESTION)
        stream = await client.chat.completions.create(model="ffs-4/scripted", messages=QUESTION, stream=True)
        streamed = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        await client.close()
    assert reply.choices[0].message.content == streamed  # FFS on the scripted clock: the same winner


def test_stream_carries_live_events_as_comments(serve: Serve, scripted: ScriptedBackend) -> None:
    body = {"model": "majority-3/scripted", "messages": QUESTION, "stream": True}
    with serve(scripted) as url, httpx.stream("POST", f"{url}/chat/completions", json=body) as response:
        lines = [line for line in response.iter_lines() if line]
    events = [json.loads(line.removeprefix(": paragen ")) for line in lines if line.startswith(": paragen ")]
    data = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
    assert [e["type"] for e in events].count("sample_started") == 3
    ended = [e for e in events if e["type"] == "sample_ended"]
    assert len(ended) == 3 and all(e["trace"]["status"] == "ok" for e in ended)
    assert data[-1] == "[DONE]"
    answer = "".join(json.loads(d)["choices"][0]["delta"].get("content") or "" for d in data[:-1])
    assert "\\boxed{12}" in answer
    # Events come before the answer's text.
    last_event = max(i for i, line in enumerate(lines) if line.startswith(": paragen "))
    first_text = min(
        i for i, line in enumerate(lines) if '"content":"' in line and '"content":""' not in line
    )
    assert last_event < first_text


def test_completions_endpoint(serve: Serve, scripted: ScriptedBackend) -> None:
    with serve(scripted) as url, sync_client(url) as client:
        plain = client.completions.create(model="scripted", prompt="7 + 5 =", max_tokens=8)
        voted = client.completions.create(model="majority-2/scripted", prompt="What is 7 + 5?")
        chunks = list(client.completions.create(model="scripted", prompt="7 + 5 =", stream=True))
    assert scripted.streams[0].request.prompt == "7 + 5 ="  # a raw prompt stays raw
    assert plain.choices[0].text == "step step so 7 + 5 = 12." and plain.choices[0].finish_reason == "length"
    assert "\\boxed{12}" in voted.choices[0].text
    assert "".join(c.choices[0].text for c in chunks if c.choices).startswith("step step so")


def test_models_lists_the_model_and_every_strategy(serve: Serve, scripted: ScriptedBackend) -> None:
    with serve(scripted) as url, sync_client(url) as client:
        ids = [m.id for m in client.models.list()]
    assert ids[0] == "scripted"
    assert {"majority/scripted", "ffs/scripted", "pdr/scripted"} <= set(ids)


def test_n_choices_are_independent_runs(serve: Serve, scripted: ScriptedBackend) -> None:
    with serve(scripted) as url, sync_client(url) as client:
        reply = client.chat.completions.create(model="majority-2/scripted", messages=QUESTION, n=3)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert len(scripted.streams) == 6
    assert reply.usage is not None and reply.usage.completion_tokens == sum(
        s.tokens_sent for s in scripted.streams
    )


def test_api_key(serve: Serve, scripted: ScriptedBackend) -> None:
    with serve(scripted, api_key="s3cret-key") as url:
        with openai.OpenAI(base_url=url, api_key="s3cret-key", max_retries=0) as good:
            assert (
                good.chat.completions.create(model="scripted", messages=QUESTION).choices[0].message.content
            )
        with (
            pytest.raises(openai.AuthenticationError) as caught,
            openai.OpenAI(base_url=url, api_key="s3cret-kez", max_retries=0) as bad,
        ):
            bad.models.list()
        assert "s3cret" not in caught.value.response.text
        health = httpx.get(url.removesuffix("/v1") + "/health")
    assert health.status_code == 200 and health.json()["runs_total"] == 1
