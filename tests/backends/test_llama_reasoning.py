"""Thinking on llama.cpp's server, as llama-cpp-python 0.3.36 serves it.

llama-cpp-python's server (``python -m llama_cpp.server``) has no reasoning option: no
``--reasoning-format``, and no ``reasoning_content`` in what it sends (those are the C++
``llama-server``'s, which the llama-cpp-python wheel does not build). So a thinking model's
``<think>`` ... ``</think>`` stays in the text, and paragen splits it by the model family's
delimiters. SmolLM2 does not think by itself: a raw prompt that opens ``<think>`` makes its output
a thought (never closed), and one that closes it makes its output the answer. The same greedy
request through ``generate()``, which does not split, is the witness of the server's raw text.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from real_servers import Server, start_llama

from paragen import BaseStrategy, RunContext, StrategyConfig
from paragen.backends.base import generate
from paragen.backends.openai import OpenAIBackend
from paragen.errors import ConfigError
from paragen.orchestrator import Orchestrator
from paragen.types import GenerateRequest, Problem, SamplingParams, StrategyResult

pytestmark = [pytest.mark.server, pytest.mark.anyio]

OPENED = "Question: what is 6 times 7?\nAnswer: <think>\n"
CLOSED = "Question: what is 6 times 7?\nAnswer: <think>\n6 times 7 is 42.\n</think>\n"
GREEDY = SamplingParams(max_tokens=12, temperature=0.0)


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_llama(tmp_path_factory.mktemp("llama-reasoning") / "server.log")
    yield server
    server.stop()


class _RawSample(BaseStrategy[StrategyConfig]):
    """One raw completion of the problem's question, its trace as the run split it."""

    name = "raw_sample"

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        trace = await ctx.sample(ctx.request(prompt=problem.question))
        return ctx.finish(None, text=trace.text, reasoning=trace.reasoning)


async def _raw_and_split(server: Server, prompt: str) -> tuple[str, StrategyResult]:
    backend = OpenAIBackend.from_spec(server.url, api_key_env=None)
    [raw] = await generate(backend, GenerateRequest(prompt=prompt, params=GREEDY))
    result = await Orchestrator(backend, defaults=GREEDY).run(_RawSample(), Problem(question=prompt))
    await backend.aclose()
    assert raw.reasoning == ""  # llama-cpp-python sends no reasoning field
    return raw.text, result


async def test_output_after_an_opened_think_is_all_thinking(llama: Server) -> None:
    raw, result = await _raw_and_split(llama, OPENED)
    trace = result.traces[0]
    assert raw.strip() and "</think>" not in raw
    assert (trace.thinking, trace.reasoning, trace.text) == ("open", raw, "")
    assert trace.reasoning_tokens == trace.completion_tokens > 0  # it may end (EOS) before max_tokens
    usage = result.usage
    assert (usage.reasoning_tokens, usage.answer_tokens, usage.num_open_thinking) == (
        trace.completion_tokens,
        0,
        1,
    )


async def test_output_after_a_closed_think_is_all_answer(llama: Server) -> None:
    raw, result = await _raw_and_split(llama, CLOSED)
    trace = result.traces[0]
    assert raw.strip() and "<think>" not in raw
    assert (trace.thinking, trace.reasoning, trace.text) == ("none", "", raw)
    assert trace.reasoning_tokens == 0 and trace.answer_tokens == trace.completion_tokens > 0


async def test_thinking_budgets_are_refused_as_the_server_enforces_none(llama: Server) -> None:
    """The server has no budget field (its /v1/models says owned_by "me"): asked for budgets, the
    backend refuses when it opens, before any request, instead of trusting an unbounded thought."""
    backend = OpenAIBackend.from_spec(llama.url, api_key_env=None, thinking_budgets=True)
    with pytest.raises(ConfigError, match="llama-cpp-python's server, which enforces no thinking budget"):
        await backend.open()
    await backend.aclose()
    plain = OpenAIBackend.from_spec(llama.url, api_key_env=None)
    assert not (await plain.open()).thinking_budget  # without budgets it opens, and takes none
    await plain.aclose()
