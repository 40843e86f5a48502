"""The OpenAI backend against a real `vllm serve` of SmolLM2 started with a reasoning parser, a
reasoning config (so it enforces thinking budgets) and a chat template that opens the thinking.

The parser is ``olmo3``: vLLM's ``deepseek_r1`` and ``qwen3`` parsers need ``<think>`` and
``</think>`` to be single tokens of the vocabulary, which SmolLM2's are not (vLLM then refuses to
start: "could not locate think start/end tokens in the tokenizer"); ``olmo3`` finds them in the
text and, streamed, takes the output for thinking until ``</think>``. The chat template is
SmolLM2's own with the reply opened by ``<think>\\n``, as DeepSeek-R1's template opens its
replies: that is what puts a request in thinking for vLLM's budget, which looks for the start
string's tokens in the prompt. SmolLM2 never writes ``</think>`` itself, so without a budget
everything it writes comes back as reasoning and none of it as content.

With a budget the server forces ``reasoning_end_str`` once the thinking has spent it, and the
model answers after it. vLLM 0.32 counts a thinking opened in the prompt short by the start
string's tokens less one (it takes the opener for one token): ``<think>`` is three tokens of
SmolLM2's, so the thinking runs up to two tokens past the budget (:data:`OVERRUN`). With a
single-token ``<think>`` (Qwen3, DeepSeek-R1) the budget is exact.

A reply prefilled with thinking goes to this server as a raw completion of its rendered template
(paragen.backends.openai_render), checked against the same completion sent by hand.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from real_servers import Server, smollm2_dir, start_vllm

from paragen import BaseStrategy, RunContext, StrategyConfig
from paragen.answers import extract_answer
from paragen.backends.base import generate
from paragen.backends.openai import OpenAIBackend
from paragen.orchestrator import Orchestrator
from paragen.prompts import solve_messages
from paragen.strategy import build_strategy
from paragen.types import ChatMessage, GenerateRequest, Problem, SamplingParams, StrategyResult, Trace


@pytest.fixture
def anyio_backend() -> str:
    # asyncio only, as the other modules that share one `vllm serve` per module.
    return "asyncio"


pytestmark = [pytest.mark.server, pytest.mark.vllm_server, pytest.mark.anyio]

QUESTION = "What is 6 times 7?"
# What the server writes when a budget is spent: the end of thinking, then a blank line that
# SmolLM2 answers after (after a bare "</think>" it ends its reply at once).
REASONING_CONFIG = {"reasoning_start_str": "<think>", "reasoning_end_str": "</think>\n\n"}
BUDGET = 5
OVERRUN = 2  # vLLM 0.32's overcount of a thinking opened in the prompt by a three-token <think>


def think_open_template(directory: Path) -> Path:
    """SmolLM2's chat template with its reply opened by ``<think>\\n``."""
    own = (smollm2_dir() / "chat_template.jinja").read_text()
    reply = "'<|im_start|>assistant\n'"
    assert reply in own, "SmolLM2's chat template changed"
    path = directory / "think_open.jinja"
    path.write_text(own.replace(reply, "'<|im_start|>assistant\n<think>\n'"))
    return path


def server_flags(directory: Path) -> list[str]:
    """The flags that make `vllm serve` split the thinking and enforce thinking budgets."""
    return [
        *("--reasoning-parser", "olmo3", "--reasoning-config", json.dumps(REASONING_CONFIG)),
        *("--chat-template", str(think_open_template(directory))),
    ]


@pytest.fixture(scope="module")
def reasoning_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("vllm-reasoning")
    server = start_vllm(directory / "server.log", flags=server_flags(directory))
    yield server
    server.stop()


def _greedy_chat(max_tokens: int, thinking_budget: int | None = None) -> GenerateRequest:
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    messages = tuple(solve_messages(QUESTION))  # what single asks
    return GenerateRequest(messages=messages, params=params, thinking_budget=thinking_budget)


async def _single(backend: OpenAIBackend, max_tokens: int) -> StrategyResult:
    defaults = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    return await Orchestrator(backend, defaults=defaults).run(
        build_strategy("single"), Problem(question=QUESTION)
    )


async def _counted_right(backend: OpenAIBackend, trace: Trace) -> None:
    """The trace's thinking tokens are its thinking's tokens, by the server's own tokenizer."""
    assert await backend.count_tokens(trace.reasoning) == (trace.reasoning_tokens, "tokenizer")
    assert trace.reasoning_count_source in ("server", "token_ids")
    assert trace.reasoning_tokens + trace.answer_tokens == trace.completion_tokens


async def test_without_a_budget_everything_smollm2_writes_is_reasoning(reasoning_server: Server) -> None:
    backend = OpenAIBackend.from_spec(reasoning_server.url, api_key_env=None)
    [completion] = await generate(backend, _greedy_chat(24))
    assert completion.text == "" and completion.reasoning.strip()
    result = await _single(backend, 24)
    await backend.aclose()
    trace = result.traces[0]
    assert trace.is_ok and trace.finish_reason == "length"
    assert (trace.thinking, trace.text, trace.answer, result.answer) == ("open", "", None, None)
    assert trace.reasoning == completion.reasoning  # the server's reasoning field, whole
    assert trace.reasoning_tokens == trace.completion_tokens == 24
    assert trace.reasoning_count_source in ("server", "token_ids")
    usage = result.usage
    assert (usage.reasoning_tokens, usage.answer_tokens, usage.num_open_thinking) == (24, 0, 1)


async def test_the_backend_budget_ends_the_thinking_and_the_answer_follows(reasoning_server: Server) -> None:
    budgeted = OpenAIBackend.from_spec(reasoning_server.url, api_key_env=None, thinking_token_budget=BUDGET)
    assert (await budgeted.open()).thinking_budget
    result = await _single(budgeted, 48)
    trace = result.traces[0]
    assert trace.is_ok and trace.thinking == "closed" and trace.text.strip()
    assert BUDGET <= trace.reasoning_tokens <= BUDGET + OVERRUN
    await _counted_right(budgeted, trace)
    usage = result.usage
    assert (usage.reasoning_tokens, usage.answer_tokens) == (trace.reasoning_tokens, trace.answer_tokens)
    assert usage.num_open_thinking == 0
    await budgeted.aclose()
    # The same greedy request without a budget thinks past it.
    plain = OpenAIBackend.from_spec(reasoning_server.url, api_key_env=None)
    unbounded = (await _single(plain, 48)).traces[0]
    await plain.aclose()
    assert unbounded.thinking == "open" and unbounded.reasoning_tokens > BUDGET + OVERRUN
    assert unbounded.reasoning.startswith(trace.reasoning)  # greedy: the same thought, cut


async def test_a_requests_budget_overrides_the_backends(reasoning_server: Server) -> None:
    backend = OpenAIBackend.from_spec(reasoning_server.url, api_key_env=None, thinking_token_budget=BUDGET)
    [short] = await generate(backend, _greedy_chat(48, thinking_budget=2))
    [longer] = await generate(backend, _greedy_chat(48, thinking_budget=BUDGET + 4))
    [none] = await generate(backend, _greedy_chat(48, thinking_budget=0))  # what nothinking asks
    counts = [(await backend.count_tokens(c.reasoning))[0] for c in (short, longer)]
    await backend.aclose()
    assert short.text.strip() and longer.text.strip()  # both answered after the thinking ended
    assert 2 <= counts[0] <= 2 + OVERRUN and BUDGET + 4 <= counts[1] <= BUDGET + 4 + OVERRUN
    assert longer.reasoning.startswith(short.reasoning)
    assert none.reasoning == "" and none.text.strip()  # the thinking closed before its first token


async def test_budget_forcing_asks_the_server_for_its_cap(reasoning_server: Server) -> None:
    backend = OpenAIBackend.from_spec(reasoning_server.url, api_key_env=None, thinking_budgets=True)
    before = reasoning_server.wait_idle()["vllm:request_success_total"]
    strategy = build_strategy("budget_forcing", {"think_tokens": BUDGET, "answer_tokens": 32})
    result = await Orchestrator(backend, defaults=SamplingParams(temperature=0.0)).run(
        strategy, Problem(question=QUESTION)
    )
    await backend.aclose()
    after = reasoning_server.wait_idle()["vllm:request_success_total"]
    [trace] = result.traces  # one request: the server ended the thinking, no forced continuation
    assert after - before == 1 and result.metrics["server"] == 1.0 and result.metrics["forced"] == 1.0
    assert trace.thinking == "closed" and BUDGET <= trace.reasoning_tokens <= BUDGET + OVERRUN
    assert result.text == trace.text and result.reasoning == trace.reasoning
    # Read from the answer the model wrote after the server's end of thinking, not from the thought.
    # Which number SmolLM2 writes there depends on the CPU's kernels (AVX2 fp32: "7"; AVX-512 bf16: "42").
    assert trace.text.strip() and result.answer == extract_answer(trace.text)


THOUGHT = "<think>\nSix times seven"


async def test_a_thought_continued_mid_way_is_a_raw_completion_of_the_server_rendered_prompt(
    reasoning_server: Server, tmp_path: Path
) -> None:
    """A reply prefilled with an open thought goes on as a raw completion: the witness is the same
    greedy completion of the server's template (rendered by transformers) plus the thought, by hand.
    The template opens ``<think>\\n`` itself, so the reply's own opener is not written twice."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir())
    messages = solve_messages(QUESTION)
    head = [{"role": m.role, "content": m.content} for m in messages]
    template = think_open_template(tmp_path).read_text()
    rendered = tokenizer.apply_chat_template(
        head, chat_template=template, tokenize=False, add_generation_prompt=True
    )
    assert isinstance(rendered, str) and rendered.endswith("<think>\n")
    params = SamplingParams(max_tokens=12, temperature=0.0)
    backend = OpenAIBackend.from_spec(reasoning_server.url, api_key_env=None)
    witness_prompt = rendered + THOUGHT.removeprefix("<think>\n")
    [witness] = await generate(backend, GenerateRequest(prompt=witness_prompt, params=params))
    reply = ChatMessage(role="assistant", content=THOUGHT)
    request = GenerateRequest(messages=(*messages, reply), continue_final=True, params=params)
    [continued] = await generate(backend, request)
    # Text, not reasoning: vLLM parses reasoning on chat requests only, and this one was raw.
    assert continued.text == witness.text and continued.text.strip() and continued.reasoning == ""
    result = await Orchestrator(backend, defaults=params).run(_ContinueThought(), Problem(question=QUESTION))
    await backend.aclose()
    trace = result.traces[0]
    assert (trace.thinking, trace.reasoning, trace.text) == ("open", witness.text, "")
    assert trace.reasoning_tokens == trace.completion_tokens == 12


class _ContinueThought(BaseStrategy[StrategyConfig]):
    """The problem's reply prefilled with an open thought and continued, as budget forcing does."""

    name = "continue_thought"

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        messages = [*solve_messages(problem.question), ChatMessage(role="assistant", content=THOUGHT)]
        trace = await ctx.sample(ctx.request(messages=messages, continue_final=True))
        return ctx.finish(None, text=trace.text, reasoning=trace.reasoning)
