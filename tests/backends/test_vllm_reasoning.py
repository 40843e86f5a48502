"""The OpenAI backend against a real `vllm serve` of SmolLM2 started with a reasoning parser.

The parser is ``olmo3``: vLLM's ``deepseek_r1`` and ``qwen3`` parsers need ``<think>`` and
``</think>`` to be single tokens of the vocabulary, which SmolLM2's are not (vLLM then refuses to
start: "could not locate think start/end tokens in the tokenizer"); ``olmo3`` finds them in the
text and, streamed, takes the output for thinking until ``</think>``, as ``deepseek_r1`` does for
a template that opens the thinking. SmolLM2 never writes ``</think>``, so everything it writes
comes back as reasoning and none of it as content. paragen must see exactly that: a sample still
thinking when it ended, no answer, every completion token a reasoning token. The same greedy
request through ``generate()`` is the witness of what the server sent.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from real_servers import Server, smollm2_dir, start_vllm

from paragen import BaseStrategy, RunContext, StrategyConfig
from paragen.backends.base import generate
from paragen.backends.openai import OpenAIBackend
from paragen.orchestrator import Orchestrator
from paragen.prompts import solve_messages
from paragen.strategy import build_strategy
from paragen.types import ChatMessage, GenerateRequest, Problem, SamplingParams, StrategyResult


@pytest.fixture
def anyio_backend() -> str:
    # asyncio only, as the other modules that share one `vllm serve` per module.
    return "asyncio"


pytestmark = [pytest.mark.server, pytest.mark.vllm_server, pytest.mark.anyio]

QUESTION = "What is 6 times 7?"


@pytest.fixture(scope="module")
def reasoning_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    flags = ["--reasoning-parser", "olmo3"]
    server = start_vllm(tmp_path_factory.mktemp("vllm-reasoning") / "server.log", flags=flags)
    yield server
    server.stop()


def _greedy_chat(max_tokens: int) -> GenerateRequest:
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    return GenerateRequest(messages=tuple(solve_messages(QUESTION)), params=params)  # what single asks


async def test_everything_smollm2_writes_is_reasoning(reasoning_server: Server) -> None:
    backend = OpenAIBackend.from_spec(reasoning_server.url, api_key_env=None)
    [completion] = await generate(backend, _greedy_chat(24))
    assert completion.text == "" and completion.reasoning.strip()
    defaults = SamplingParams(max_tokens=24, temperature=0.0)
    result = await Orchestrator(backend, defaults=defaults).run(
        build_strategy("single"), Problem(question=QUESTION)
    )
    await backend.aclose()
    trace = result.traces[0]
    assert trace.is_ok and trace.finish_reason == "length"
    assert (trace.thinking, trace.text, trace.answer, result.answer) == ("open", "", None, None)
    assert trace.reasoning == completion.reasoning  # the server's reasoning field, whole
    assert trace.reasoning_tokens == trace.completion_tokens == 24
    assert trace.reasoning_count_source in ("server", "token_ids")
    usage = result.usage
    assert (usage.reasoning_tokens, usage.answer_tokens, usage.num_open_thinking) == (24, 0, 1)


async def test_a_thought_continued_mid_way_is_a_raw_completion_of_the_server_rendered_prompt(
    reasoning_server: Server,
) -> None:
    # The witness: SmolLM2's own chat template (transformers) before the reply, plus the thought so
    # far, sent by hand as one greedy raw completion.
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir())
    messages = solve_messages(QUESTION)
    head = [{"role": m.role, "content": m.content} for m in messages]
    rendered = tokenizer.apply_chat_template(head, tokenize=False, add_generation_prompt=True)
    assert isinstance(rendered, str)
    thought = "<think>\nSix times seven"
    params = SamplingParams(max_tokens=12, temperature=0.0)
    backend = OpenAIBackend.from_spec(reasoning_server.url, api_key_env=None)
    [witness] = await generate(backend, GenerateRequest(prompt=rendered + thought, params=params))
    reply = ChatMessage(role="assistant", content=thought)
    request = GenerateRequest(messages=(*messages, reply), continue_final=True, params=params)
    [continued] = await generate(backend, request)
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
        reply = ChatMessage(role="assistant", content="<think>\nSix times seven")
        messages = [*solve_messages(problem.question), reply]
        trace = await ctx.sample(ctx.request(messages=messages, continue_final=True))
        return ctx.finish(None, text=trace.text, reasoning=trace.reasoning)
