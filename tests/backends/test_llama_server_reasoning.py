"""Thinking on llama.cpp's C++ `llama-server` started with `--reasoning-format deepseek`.

SmolLM2 does not think by itself, and its own chat template has no thinking section, so the server
is given one (`--jinja --chat-template-file smollm2_think_template.jinja`): ChatML whose generation
prompt opens ``<think>``. From that template llama-server's analysis learns the delimiters
(``<think>`` / ``</think>``, strings of several tokens in SmolLM2's vocabulary, which llama.cpp
matches as token sequences), so its reasoning parser sends what follows the opened ``<think>`` as
``reasoning_content`` until ``</think>``, and its reasoning budget (``--reasoning-budget``, or a
request's ``thinking_budget_tokens``) counts the thinking tokens and then forces ``</think>``.

What paragen must see, checked against a witness: the same greedy request sent straight to the
server with ``reasoning_format: "none"`` (the raw text, the template's ``<think>`` included) and
``logprobs`` (the tokens it generated, one entry each, the forced ``</think>`` and EOS included).

Token counts: llama-server's usage has no ``completion_tokens_details.reasoning_tokens``, so
paragen counts the thinking one token per streamed piece that carried thinking (every thinking
token of SmolLM2 here streams as a piece of its own), and the total from the server's usage; the
forced ``</think>`` tokens stream as no piece and count to the answer part. A sample still thinking
at its end counts every token as thinking (exact: the server's total).

The budget applies to chat requests only: the thinking delimiters come from the chat template, so
a raw prompt on ``/v1/completions`` is not bounded, however its prompt opens ``<think>``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from real_servers import SERVED_NAME, Server, start_llama_server

from paragen import BaseStrategy, RunContext, StrategyConfig
from paragen.backends.base import generate
from paragen.backends.openai import OpenAIBackend
from paragen.orchestrator import Orchestrator
from paragen.types import ChatMessage, GenerateRequest, Problem, SamplingParams, StrategyResult

pytestmark = [pytest.mark.server, pytest.mark.anyio]

TEMPLATE = Path(__file__).with_name("smollm2_think_template.jinja")
QUESTION = "What is the capital of France?"
CLOSE = ["</", "think", ">"]  # how SmolLM2's tokenizer writes "</think>"


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    flags = ["--jinja", "--chat-template-file", str(TEMPLATE), "--reasoning-format", "deepseek"]
    server = start_llama_server(tmp_path_factory.mktemp("llama-server") / "server.log", flags=flags)
    yield server
    server.stop()


class _ChatSampleConfig(StrategyConfig):
    thinking_budget: int | None = None


class _ChatSample(BaseStrategy[_ChatSampleConfig]):
    """One chat sample of the problem's question, with the config's thinking budget."""

    name = "chat_sample"
    Config = _ChatSampleConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        messages = [{"role": "user", "content": problem.question}]
        budget = self.config.thinking_budget
        trace = await ctx.sample(ctx.request(messages=messages, thinking_budget=budget))
        return ctx.finish(None, text=trace.text, reasoning=trace.reasoning)


def _witness(server: Server, max_tokens: int, budget: int | None = None) -> tuple[str, list[str]]:
    """The raw text (after the template's ``<think>``) and the tokens of the greedy reply."""
    body: dict[str, Any] = {
        "model": SERVED_NAME,
        "messages": [{"role": "user", "content": QUESTION}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "reasoning_format": "none",
        "logprobs": True,
    }
    if budget is not None:
        body["thinking_budget_tokens"] = budget
    reply = httpx.post(f"{server.url}/chat/completions", json=body, timeout=60.0).json()
    choice = reply["choices"][0]
    raw = choice["message"]["content"]
    assert raw.startswith("<think>")  # the template's opener, which the raw format leaves in
    return raw.removeprefix("<think>"), [t["token"] for t in choice["logprobs"]["content"]]


def _thinking_tokens(tokens: list[str]) -> int:
    """How many tokens came before ``</think>`` (all of them when it never came)."""
    for at in range(len(tokens)):
        if tokens[at : at + len(CLOSE)] == CLOSE:
            return at
    return len(tokens)


async def _run(server: Server, max_tokens: int, budget: int | None = None, **options: Any) -> StrategyResult:
    backend = OpenAIBackend.from_spec(server.url, api_key_env=None, **options)
    orchestrator = Orchestrator(backend, defaults=_greedy(max_tokens))
    try:
        return await orchestrator.run(_ChatSample(thinking_budget=budget), Problem(question=QUESTION))
    finally:
        await backend.aclose()


async def test_llama_server_is_a_llama_cpp_server_that_takes_budgets(llama_server: Server) -> None:
    backend = OpenAIBackend.from_spec(llama_server.url, api_key_env=None, thinking_budgets=True)
    capabilities = await backend.open()
    [replica] = backend.pool.replicas
    info = await backend.server_info(replica)
    await backend.aclose()
    assert (info.kind, info.model, info.native_n) == ("llama_cpp", SERVED_NAME, False)
    assert capabilities.thinking_budget and capabilities.chat


async def test_a_sample_cut_off_while_thinking_is_all_reasoning(llama_server: Server) -> None:
    raw, tokens = _witness(llama_server, max_tokens=4)
    assert len(tokens) == _thinking_tokens(tokens) == 4  # no </think>: cut off while thinking
    backend = OpenAIBackend.from_spec(llama_server.url, api_key_env=None)
    messages = (ChatMessage(role="user", content=QUESTION),)
    [completion] = await generate(backend, GenerateRequest(messages=messages, params=_greedy(4)))
    await backend.aclose()
    assert (completion.reasoning, completion.text) == (raw, "")  # the server sent it apart, whole
    result = await _run(llama_server, max_tokens=4)
    trace = result.traces[0]
    assert (trace.thinking, trace.reasoning, trace.text, trace.finish_reason) == ("open", raw, "", "length")
    assert trace.reasoning_tokens == trace.completion_tokens == 4
    assert trace.reasoning_count_source == "server"  # every token of it, counted by the server
    usage = result.usage
    assert (usage.reasoning_tokens, usage.answer_tokens, usage.num_open_thinking) == (4, 0, 1)


@pytest.mark.parametrize("how", ["request", "backend_default"])
async def test_the_thinking_budget_ends_the_thinking_there(llama_server: Server, how: str) -> None:
    budget = 3
    _, unbounded = _witness(llama_server, max_tokens=30)
    assert _thinking_tokens(unbounded) > budget  # without a budget it thinks longer
    raw, tokens = _witness(llama_server, max_tokens=30, budget=budget)
    thought = _thinking_tokens(tokens)
    assert thought == budget and tokens[budget : budget + len(CLOSE)] == CLOSE  # forced there
    reasoning, answer = raw.split("</think>")
    if how == "request":  # the request's own budget, on a backend that says the server enforces them
        result = await _run(llama_server, 30, budget, thinking_budgets=True)
    else:  # the backend's budget, sent on every request that sets none
        result = await _run(llama_server, 30, thinking_token_budget=budget)
    trace = result.traces[0]
    assert (trace.thinking, trace.reasoning, trace.text) == ("closed", reasoning, answer)
    assert answer.strip() and trace.finish_reason == "stop"
    assert trace.completion_tokens == len(tokens)  # the server's total: </think> and EOS included
    assert trace.reasoning_tokens == thought == budget
    assert trace.reasoning_count_source == "estimate"  # one per piece: the server counts no thinking
    assert result.usage.reasoning_tokens == budget and result.usage.num_open_thinking == 0


async def test_a_zero_budget_answers_without_thinking(llama_server: Server) -> None:
    raw, tokens = _witness(llama_server, max_tokens=30, budget=0)
    assert raw.startswith("</think>") and tokens[: len(CLOSE)] == CLOSE
    result = await _run(llama_server, 30, 0, thinking_budgets=True)
    trace = result.traces[0]
    assert (trace.thinking, trace.reasoning, trace.reasoning_tokens) == ("none", "", 0)
    assert trace.text == raw.removeprefix("</think>").strip() != ""


async def test_a_raw_prompt_is_not_bounded(llama_server: Server) -> None:
    """A completion has no chat template, so llama-server knows no delimiters to count between: the
    budget is not applied, and the thinking stays in the text, where paragen splits it."""
    prompt = f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n<think>"
    backend = OpenAIBackend.from_spec(llama_server.url, api_key_env=None, thinking_budgets=True)
    request = GenerateRequest(prompt=prompt, params=_greedy(30), thinking_budget=1)
    [completion] = await generate(backend, request)
    await backend.aclose()
    assert completion.reasoning == "" and "</think>" not in completion.text
    assert completion.num_tokens > 1 + len(CLOSE)


def _greedy(max_tokens: int) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0)
