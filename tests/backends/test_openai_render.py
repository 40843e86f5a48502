"""A reply with thinking in it, continued on vLLM as a raw completion of the server-rendered prompt.

The fake server renders a toy chat template at /tokenize (its token ids are the characters' code
points, so /detokenize gives the rendered text back) and records every body; the real server's
rendering is in test_vllm_reasoning.py.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from openai_fakes import FakeServer, chat_chunk, chunk, usage_chunk

from paragen import BaseStrategy, RunContext, StrategyConfig
from paragen.backends.base import generate
from paragen.backends.openai import OpenAIBackend
from paragen.backends.openai_render import ThoughtSplitter
from paragen.orchestrator import Orchestrator
from paragen.types import ChatMessage, Delta, GenerateRequest, Problem, StrategyResult

pytestmark = pytest.mark.anyio

USER = ChatMessage(role="user", content="6*7?")


class TemplateServer(FakeServer):
    """A vLLM fake whose /tokenize renders ``<|user|>...`` turns, opening ``<think>`` where asked."""

    def __init__(self, opens_thinking: bool = False, owned_by: str = "vllm") -> None:
        super().__init__(owned_by=owned_by)
        self.opens_thinking = opens_thinking
        self.rendering: list[dict[str, Any]] = []
        self.default = lambda request: self.sse(
            [chunk(" so 42."), chunk("", finish="stop"), usage_chunk(9, 3), "[DONE]"]
        )

    def handler(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path in ("/tokenize", "/detokenize"):
            body = json.loads(request.content)
            self.rendering.append({"path": path, **body})
            if path == "/detokenize":
                return httpx.Response(200, json={"prompt": "".join(map(chr, body["tokens"]))})
            text = "".join(f"<|{m['role']}|>{m['content']}\n" for m in body["messages"]) + "<|assistant|>\n"
            text += "<think>\n" if self.opens_thinking else ""
            return httpx.Response(200, json={"count": len(text), "tokens": [ord(c) for c in text]})
        return super().handler(request)


def make(server: FakeServer, **options: Any) -> OpenAIBackend:
    return OpenAIBackend.from_spec("http://fake/v1", transport=server.transport, api_key_env=None, **options)


def continued(reply: str) -> GenerateRequest:
    return GenerateRequest(messages=(USER, ChatMessage(role="assistant", content=reply)), continue_final=True)


async def test_an_open_thought_goes_on_as_a_raw_completion_of_the_rendered_prompt() -> None:
    server = TemplateServer()
    [completion] = await generate(make(server), continued("<think>\n6 times 7"))
    assert completion.text == " so 42."
    tokenize, detokenize = server.rendering
    assert tokenize["messages"] == [{"role": "user", "content": "6*7?"}]
    assert tokenize["add_generation_prompt"] is True
    assert detokenize["tokens"] == [ord(c) for c in "<|user|>6*7?\n<|assistant|>\n"]
    [body] = server.bodies
    assert server.generation_requests()[0].url.path == "/v1/completions"
    assert body["prompt"] == "<|user|>6*7?\n<|assistant|>\n<think>\n6 times 7"
    assert body["add_special_tokens"] is False and "messages" not in body


async def test_where_the_template_opens_the_thinking_the_reply_does_not_open_it_again() -> None:
    server = TemplateServer(opens_thinking=True)
    await generate(make(server, thinking="think_open"), continued("<think>\n6 times 7"))
    assert server.bodies[0]["prompt"] == "<|user|>6*7?\n<|assistant|>\n<think>\n6 times 7"


async def test_a_forced_answer_keeps_the_thought_it_answers() -> None:
    # A closed thought: DeepSeek-R1's template would keep only what follows </think>.
    server = TemplateServer()
    reply = "<think>\n6 times 7 is 42.\n</think>\n\nThe answer is"
    await generate(make(server), continued(reply))
    assert server.bodies[0]["prompt"].endswith("<|assistant|>\n" + reply)


@pytest.mark.parametrize(
    ("owned_by", "options", "reply"),
    [
        ("vllm", {}, "The answer is"),  # no thinking in the reply: the chat template is fine
        ("vllm", {"raw_continuation": False}, "<think>\nhm"),
        ("vllm", {"thinking": "none"}, "<think>\nhm"),
        ("sglang", {}, "<think>\nhm"),  # no /detokenize to render with
    ],
)
async def test_other_continuations_stay_on_the_chat_template(
    owned_by: str, options: dict[str, Any], reply: str
) -> None:
    server = TemplateServer(owned_by=owned_by)
    server.default = lambda request: server.sse(
        [chat_chunk(" 42", finish="stop"), usage_chunk(9, 1), "[DONE]"]
    )
    await generate(make(server, **options), continued(reply))
    assert server.rendering == []
    [body] = server.bodies
    assert body["continue_final_message"] is True and body["messages"][-1]["content"] == reply


async def test_the_template_options_of_the_requests_render_the_prompt_too() -> None:
    server = TemplateServer()
    kwargs = {"enable_thinking": True}
    await generate(make(server, extra_body={"chat_template_kwargs": kwargs}), continued("<think>\nhm"))
    assert server.rendering[0]["chat_template_kwargs"] == kwargs


class _Continue(BaseStrategy[StrategyConfig]):
    """One continuation of a prefilled reply, as budget forcing and the finishers send it."""

    name = "continue_reply"

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        messages = [USER, ChatMessage(role="assistant", content=problem.question)]
        trace = await ctx.sample(ctx.request(messages=messages, continue_final=True))
        return ctx.finish(None, text=trace.text, reasoning=trace.reasoning)


async def test_the_continuation_of_an_open_thought_is_thinking_in_the_trace() -> None:
    server = TemplateServer()
    server.default = lambda request: server.sse(
        [chunk(" so 42"), chunk(".", finish="length"), usage_chunk(9, 2), "[DONE]"]
    )
    result = await Orchestrator(make(server)).run(_Continue(), Problem(question="<think>\n6 times 7"))
    trace = result.traces[0]
    assert (trace.thinking, trace.reasoning, trace.text) == ("open", " so 42.", "")
    assert trace.reasoning_tokens == 2


def test_a_delimiter_written_in_pieces_still_ends_the_thought() -> None:
    """SmolLM2 writes "</think>" as three tokens: the text that may begin it waits for the next piece."""
    splitter = ThoughtSplitter("think")
    pieces = [" so", " 42", ".</", "think", ">", "\nThe answer", " is 42."]
    out = [splitter.split(Delta(index=0, text=p, num_tokens=1)) for p in pieces]
    assert [(d.reasoning, d.text) for d in out] == [
        (" so", ""), (" 42", ""), (".", ""), ("", ""), ("", ""), ("", "\nThe answer"), ("", " is 42."),
    ]  # fmt: skip
    assert splitter.thought_tokens == 5  # the piece that ends the thought counts to it


def test_what_waits_at_the_end_of_the_stream_is_thinking() -> None:
    splitter = ThoughtSplitter("think")
    first = splitter.split(Delta(index=0, text=" hm</th", num_tokens=2))
    last = splitter.split(Delta(index=0, text="", num_tokens=0, finish_reason="length"))
    assert (first.reasoning, last.reasoning, last.text) == (" hm", "</th", "")
