"""Resumed and hedged OpenAI streams of a reasoning model keep its thinking: a stream cut mid-thought
goes on thinking, one cut mid-answer keeps its thought, and nothing is lost, repeated or miscounted.

The replicas are fakes (httpx.MockTransport) of a vLLM serving a model whose chat template opens
``<think>`` (DeepSeek-R1's way): the model writes ``RAW`` after whatever the prompt left it, one
word a token, with vLLM's continuous usage on every chunk. With a reasoning parser the fake sends
the thinking apart (``reasoning``) as vLLM's does, deciding from the prompt whether the thought is
still open (vLLM checks the prompt for an unclosed ``<think>``) and dropping the delimiters; without
one it sends the raw text. A prefill that is not what the model wrote makes it start over, as a
model given a reply without its thought would think again. Faults are injected by cutting the first
stream after a given number of chunks (a connection reset).

A reply that holds thinking is continued on vLLM as a raw completion of the server-rendered prompt
(paragen.backends.openai_render): the fakes render ``RENDERED`` at /tokenize and /detokenize, and
answer a raw completion as vLLM does, with text only (no reasoning parser on completions).
"""

from __future__ import annotations

import re
from typing import Any

import anyio
import httpx
import pytest
from openai_fakes import Event, FakeServer

from paragen import BaseStrategy, RunContext, StrategyConfig
from paragen.backends.openai import OpenAIBackend
from paragen.orchestrator import Orchestrator
from paragen.types import ChatMessage, GenerateRequest, Problem, SamplingParams, StrategyResult, Trace

pytestmark = pytest.mark.anyio

THOUGHT = " one two three four five six"  # 6 tokens
ANSWER = " The answer is 42."  # 4 tokens
RAW = f"<think>{THOUGHT}</think>{ANSWER}"  # what the model writes; the template wrote "<think>"
TOKENS_WRITTEN = 6 + 1 + 4  # after the template's "<think>": the thought, "</think>", the answer
QUESTION = "What is 6 times 7?"


# The conversation before the reply, as the server's template renders it (opening the thought).
HEAD = f"<|user|>{QUESTION}\n<|assistant|>\n"
RENDERED = HEAD + "<think>"


class RenderingServer(FakeServer):
    """A vLLM fake whose /tokenize and /detokenize render the conversation as ``RENDERED``."""

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"count": 1, "tokens": [0]})
        if request.url.path == "/detokenize":
            return httpx.Response(200, json={"prompt": RENDERED})
        return super().handler(request)


@pytest.fixture
def server() -> FakeServer:
    return RenderingServer()


def tokens(text: str) -> list[str]:
    return re.findall(r"</?think>|\s*[^\s<]+", text)


def prefill_of(body: dict[str, Any]) -> str:
    """What the model's reply already holds: a raw prompt's text after the template's head, a
    prefilled reply, else the template's opener."""
    if "prompt" in body:
        return str(body["prompt"]).removeprefix(HEAD)
    return str(body["messages"][-1]["content"]) if body.get("continue_final_message") else "<think>"


def chat(pieces: dict[str, str], completion_tokens: int, finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": pieces, "finish_reason": finish}
    usage = {"prompt_tokens": 9, "completion_tokens": completion_tokens}
    return {"id": "c", "object": "chat.completion.chunk", "choices": [choice], "usage": usage}


def raw(text: str, completion_tokens: int, finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    usage = {"prompt_tokens": 9, "completion_tokens": completion_tokens}
    return {"id": "c", "object": "text_completion", "choices": [choice], "usage": usage}


def reasoning_model(body: dict[str, Any], *, parser: bool) -> list[Event]:
    """The chunks of the model's continuation of ``body``'s prompt."""
    if "prompt" in body:
        return raw_model(body)
    prefill = prefill_of(body)
    rest = RAW[len(prefill) :] if RAW.startswith(prefill) else RAW  # not its own text: it starts over
    thinking = prefill.rfind("<think>") > prefill.rfind("</think>")
    events: list[Event] = []
    count = thought = 0
    for token in tokens(rest):
        count += 1
        if parser and token in ("<think>", "</think>"):
            thinking = token == "<think>"
            continue  # the parser drops the delimiters; their tokens count in the next chunk's usage
        thought += parser and thinking
        events.append(chat({"reasoning": token} if parser and thinking else {"content": token}, count))
    events.append(chat({}, count, "stop"))
    final = {"prompt_tokens": 9, "completion_tokens": count}
    if parser:
        final["completion_tokens_details"] = {"reasoning_tokens": thought}  # type: ignore[assignment]
    return [*events, {"id": "c", "choices": [], "usage": final}, "[DONE]"]


def raw_model(body: dict[str, Any]) -> list[Event]:
    """A raw completion's chunks: the model's text as it writes it, delimiters and all."""
    prefill = prefill_of(body)
    assert RAW.startswith(prefill), prefill  # the raw prompt holds exactly what the model wrote
    pieces = tokens(RAW[len(prefill) :])
    events: list[Event] = [raw(token, count) for count, token in enumerate(pieces, 1)]
    final = {"prompt_tokens": 9, "completion_tokens": len(pieces)}
    return [*events, raw("", len(pieces), "stop"), {"id": "c", "choices": [], "usage": final}, "[DONE]"]


def serve(server: FakeServer, *, parser: bool, cut_after: int, slow: tuple[int, ...] = ()) -> None:
    """The first stream is reset after ``cut_after`` chunks; the generation requests numbered in
    ``slow`` wait 5 s before each chunk (a stalled replica)."""
    seen = 0

    def reply(request: httpx.Request) -> httpx.Response:
        nonlocal seen
        seen += 1
        events = reasoning_model(server.bodies[-1], parser=parser)
        if seen == 1:
            events = [*events[:cut_after], httpx.ReadError("connection reset by peer")]
        return server.sse(events, 5.0 if seen in slow else 0.0)

    server.default = reply


class _Sample(BaseStrategy[StrategyConfig]):
    """One chat sample of the question, its trace as the run split it."""

    name = "one_sample"

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        trace = await ctx.sample(ctx.request(messages=[{"role": "user", "content": problem.question}]))
        return ctx.finish(None, text=trace.text, reasoning=trace.reasoning)


def make(server: FakeServer, replicas: int = 2, **options: Any) -> OpenAIBackend:
    urls = [f"http://r{i}/v1" for i in range(1, replicas)]
    options = {"backoff": 0.0, "api_key_env": None, "thinking": "think_open", **options}
    return OpenAIBackend.from_spec("http://r0/v1", base_urls=urls, transport=server.transport, **options)


async def sample(server: FakeServer, replicas: int = 2, **options: Any) -> Trace:
    backend = make(server, replicas, **options)
    orchestrator = Orchestrator(backend, defaults=SamplingParams(max_tokens=64))
    with anyio.fail_after(10):
        result = await orchestrator.run(_Sample(), Problem(question=QUESTION))
    await backend.aclose()
    [trace] = result.traces
    return trace


def assert_whole(trace: Trace, reasoning_tokens: int = 6) -> None:
    """The sample as if no stream had been cut: its thought and answer once, every token once, the
    thought's 6 tokens as the server counts them (the continuation's count, plus those before the cut)."""
    assert (trace.status, trace.thinking, trace.reasoning, trace.text) == ("ok", "closed", THOUGHT, ANSWER)
    assert (trace.completion_tokens, trace.reasoning_tokens) == (TOKENS_WRITTEN, reasoning_tokens)
    assert trace.reasoning_count_source == "server"
    assert trace.answer_tokens == TOKENS_WRITTEN - reasoning_tokens


async def test_a_stream_cut_mid_thought_goes_on_thinking(server: FakeServer) -> None:
    """The continuation comes back as text; what precedes "</think>" in it is sent on as thinking."""
    serve(server, parser=True, cut_after=2)  # " one", " two"
    trace = await sample(server)
    _, resumed = server.bodies
    assert resumed["prompt"] == RENDERED + " one two" and resumed["add_special_tokens"] is False
    assert resumed["max_tokens"] == 64 - 2
    # The server counted 2 thinking tokens before the cut; after it, the pieces up to and with
    # "</think>" are the thinking's (5), as in any split by delimiters.
    assert_whole(trace, reasoning_tokens=7)


async def test_a_stream_cut_mid_answer_keeps_its_thought(server: FakeServer) -> None:
    serve(server, parser=True, cut_after=8)  # the thought, then " The", " answer"
    trace = await sample(server)
    _, resumed = server.bodies
    assert resumed["prompt"] == f"{RENDERED}{THOUGHT}</think> The answer"
    assert resumed["max_tokens"] == 64 - 9  # "</think>" was counted with " The"
    assert_whole(trace)


async def test_a_hedge_that_wins_a_resumed_stream_goes_on_with_the_thought(server: FakeServer) -> None:
    """Cut mid-thought on r0; the resumed request stalls on its replica, and its hedge on the third
    wins: both copies carry the thought so far, and the loser's nothing is counted."""
    serve(server, parser=True, cut_after=3, slow=(2,))
    trace = await sample(server, replicas=3, hedge_after_s=0.05)
    _, primary, hedge = server.bodies
    assert primary == hedge and primary["prompt"] == RENDERED + " one two three"
    hosts = [r.url.host for r in server.generation_requests()]
    assert hosts[0] == "r0" and set(hosts[1:]) == {"r1", "r2"}
    assert (trace.hedges, trace.hedged_tokens) == (1, 0)
    assert_whole(trace, reasoning_tokens=7)  # as the mid-thought cut


async def test_a_hedge_race_keeps_the_servers_thinking_count(server: FakeServer) -> None:
    serve(server, parser=True, cut_after=10**6, slow=(1,))  # never cut; the primary stalls
    request = GenerateRequest(messages=(ChatMessage(role="user", content=QUESTION),))
    backend = make(server, hedge_after_s=0.05)
    with anyio.fail_after(10):
        async with backend.stream(request) as stream:
            thought = "".join([d.reasoning async for d in stream])
    await backend.aclose()
    assert thought == THOUGHT and len(server.bodies) == 2 and stream.usage.hedges == 1
    assert (stream.usage.completion_tokens, stream.usage.reasoning_tokens) == (TOKENS_WRITTEN, 6)


async def test_without_a_parser_the_raw_thought_is_continued(server: FakeServer) -> None:
    """The thinking stays in the text; the reply the continuation prefills opens the thought the
    template had opened, so the model goes on thinking instead of starting over."""
    serve(server, parser=False, cut_after=2)
    trace = await sample(server)
    _, resumed = server.bodies
    assert resumed["prompt"] == RENDERED + " one two"
    assert (trace.thinking, trace.reasoning, trace.text) == ("closed", THOUGHT, ANSWER)
    assert trace.completion_tokens == TOKENS_WRITTEN
    assert trace.reasoning_tokens == 7  # the split's rule: the piece holding "</think>" is the thought's
