"""The in-process backend against vLLM's real AsyncLLM (vLLM's CPU build) serving SmolLM2.

Runs in the vLLM venv (`make unit-vllm`: pytest -m vllm there). vLLM's own Prometheus
counters and gauges, kept in this process, are the witness: tokens generated, requests
running, KV cache in use. One engine is built for the module (about a minute, enforce_eager),
with a reasoning config, so that it enforces thinking budgets; requests without one are
untouched by it (vLLM tracks only the requests that carry a budget).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from typing import Any

import anyio
import pytest
from real_servers import missing, smollm2_dir, vllm_env

from paragen import BaseStrategy, RunContext, StrategyConfig
from paragen.backends.base import generate
from paragen.backends.vllm import VLLMBackend, with_reasoning_config
from paragen.config import RepetitionDetection
from paragen.errors import ConfigError
from paragen.orchestrator import Orchestrator
from paragen.prompts import solve_messages
from paragen.strategy import build_strategy
from paragen.types import ChatMessage, GenerateRequest, Problem, SamplingParams, StrategyResult, Trace

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.anyio,
    # vLLM and the torch modules it imports warn about their own deprecations; not ours to fix.
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

ENGINE_OPTIONS: dict[str, Any] = {
    "enforce_eager": True,
    "max_model_len": 2048,
    "max_num_seqs": 32,
    "dtype": "bfloat16",
}
# The engine writes the end string when a budget is spent; SmolLM2 answers after the blank line.
REASONING_CONFIG = {"reasoning_start_str": "<think>", "reasoning_end_str": "</think>\n\n"}
BUDGET = 5
# vLLM 0.32 counts a thinking opened in the prompt short by the start string's tokens less one:
# "<think>" is three tokens of SmolLM2's (tests/backends/test_vllm_reasoning.py).
OVERRUN = 2


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # one event loop for the module: the engine's output task lives on it


@pytest.fixture(scope="module")
def model_dir() -> str:
    try:
        import vllm  # noqa: F401
    except ImportError:
        missing("vLLM is not installed in this interpreter", "make setup-vllm; run pytest from .venv-vllm")
    os.environ.update({k: v for k, v in vllm_env().items() if k.startswith(("VLLM_", "OMP_"))})
    return str(smollm2_dir())


@pytest.fixture(scope="module")
async def backend(model_dir: str) -> Any:
    backend = VLLMBackend.from_spec(model_dir, **ENGINE_OPTIONS, reasoning_config=REASONING_CONFIG)
    yield backend
    await backend.aclose()


def metrics() -> dict[str, float]:
    """vLLM's Prometheus samples in this process, summed over labels."""
    from prometheus_client import REGISTRY

    values: dict[str, float] = {}
    for family in REGISTRY.collect():
        for sample in family.samples:
            if sample.name.startswith("vllm:"):
                values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


async def idle(baseline_kv: float = 0.0, wait_s: float = 20.0) -> dict[str, float]:
    """Metrics once vLLM says nothing runs or waits and its KV cache is back to ``baseline_kv``."""
    deadline = time.monotonic() + wait_s
    while True:
        values = metrics()
        busy = values.get("vllm:num_requests_running", 0) + values.get("vllm:num_requests_waiting", 0)
        if (busy == 0 and values.get("vllm:kv_cache_usage_perc", 0) <= baseline_kv) or (
            time.monotonic() > deadline
        ):
            return values
        await anyio.sleep(0.1)


def greedy(max_tokens: int, **changes: object) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0).model_copy(update=changes)


async def test_streams_with_exact_counts_from_vllms_outputs(backend: VLLMBackend) -> None:
    before = await idle()
    prompt = "1, 2, 3, 4,"
    async with backend.stream(GenerateRequest(prompt=prompt, params=greedy(8))) as stream:
        deltas = [d async for d in stream]
        usage = stream.usage
    after = await idle()
    assert "".join(d.text for d in deltas).strip().startswith("5")
    assert len(deltas) > 1 and all(d.token_ids and len(d.token_ids) == d.num_tokens for d in deltas)
    assert usage.completion_tokens == sum(d.num_tokens for d in deltas) == 8 and usage.source == "token_ids"
    assert usage.prompt_tokens == (await backend.count_tokens(prompt))[0]
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == 8
    assert after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"] == usage.prompt_tokens


async def test_n_choices_and_cached_prompt_counts_match_vllms_counters(backend: VLLMBackend) -> None:
    # Longer than one of vLLM's KV blocks (128 tokens on CPU): only whole blocks are cached.
    prompt = "Here is a long list of fruit, one per line, with no repeats:\n" + "apple\npear\nplum\n" * 60
    length, _ = await backend.count_tokens(prompt)
    before = await idle()
    params = SamplingParams(max_tokens=6, temperature=1.0, seed=3)
    async with backend.stream(GenerateRequest(prompt=prompt, n=4, params=params)) as stream:
        deltas = [d async for d in stream]
        usage = stream.usage
    middle = await idle()
    assert {d.index for d in deltas} == {0, 1, 2, 3} and usage.completion_tokens == 24
    assert usage.prompt_tokens == 4 * length  # the prompt counts once per choice
    hits = middle["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"]
    # vLLM runs the choices as child requests, each with its cache hits, but when their outputs
    # arrive in one step it merges them (RequestOutput.add) keeping the first child's
    # num_cached_tokens: what it says is a lower bound of its own counter, never more.
    assert hits >= 3 * 128 and usage.cached_prompt_tokens is not None
    assert 0 <= usage.cached_prompt_tokens <= hits
    async with backend.stream(GenerateRequest(prompt=prompt, params=greedy(2))) as stream:
        _ = [d async for d in stream]
        again = stream.usage
    after = await idle()
    cached = again.cached_prompt_tokens
    assert cached is not None and length - 128 <= cached <= length  # whole 128-token blocks
    assert (
        again.cached_prompt_tokens
        == after["vllm:prefix_cache_hits_total"] - middle["vllm:prefix_cache_hits_total"]
    )


async def test_logprobs(backend: VLLMBackend) -> None:
    params = greedy(5, logprobs=True, top_logprobs=2)
    [completion] = await generate(backend, GenerateRequest(prompt="1, 2, 3, 4,", params=params))
    assert completion.logprobs and len(completion.logprobs) == completion.num_tokens == 5
    assert completion.top_logprobs and all(len(t) == 2 and t[0] >= t[1] for t in completion.top_logprobs)
    # Greedy: the chosen token is the most likely one.
    assert all(
        abs(lp - top[0]) < 1e-4 for lp, top in zip(completion.logprobs, completion.top_logprobs, strict=True)
    )


async def test_continue_final(backend: VLLMBackend) -> None:
    messages = (
        ChatMessage(role="user", content="Count from 1 to 10, separated by commas."),
        ChatMessage(role="assistant", content="1, 2, 3, 4, 5,"),
    )
    request = GenerateRequest(messages=messages, continue_final=True, params=greedy(4))
    [completion] = await generate(backend, request)
    assert completion.text.lstrip().startswith("6")


async def test_leaving_the_stream_aborts_and_frees_the_cache(model_dir: str, backend: VLLMBackend) -> None:
    baseline = await idle()
    endless = VLLMBackend(
        backend.config.model_copy(update={"extra_sampling": {"ignore_eos": True}}), engine=backend.engine
    )
    async with endless.stream(GenerateRequest(prompt="Once upon a time", params=greedy(1500))) as stream:
        async for _ in stream:
            if stream.usage.completion_tokens >= 5:
                break
        seen = stream.usage.completion_tokens
    after = await idle(baseline["vllm:kv_cache_usage_perc"])
    assert after["vllm:num_requests_running"] == 0
    assert after["vllm:kv_cache_usage_perc"] <= baseline["vllm:kv_cache_usage_perc"]
    generated = after["vllm:generation_tokens_total"] - baseline["vllm:generation_tokens_total"]
    # The engine may have made a few tokens paragen never read; not the 1500 it was asked for.
    assert seen <= generated <= seen + 16


async def test_repetition_detection_and_priority_reach_the_engine(backend: VLLMBackend) -> None:
    """24 "hello"s, greedy, no EOS: vLLM's repetition detection (a backend option, with a priority
    beside it) stops the loop early with its own reason; without it the sample runs to max_tokens."""
    loop = GenerateRequest(prompt="hello " * 24, params=SamplingParams(max_tokens=200, temperature=0.0))
    plain = backend.config
    no_eos = plain.model_copy(update={"extra_sampling": {"ignore_eos": True}})
    detection = RepetitionDetection(max_pattern_size=4, min_count=6)
    try:
        backend.config = no_eos
        [control] = await generate(backend, loop)
        backend.config = no_eos.model_copy(update={"repetition_detection": detection, "priority": 3})
        [stopped] = await generate(backend, loop)
    finally:
        backend.config = plain
    assert control.finish_reason == "length" and control.num_tokens == 200
    assert stopped.finish_reason == "repetition" and stopped.num_tokens < 30


async def test_ffs_on_the_real_engine(backend: VLLMBackend) -> None:
    before = await idle()
    sampling = SamplingParams(max_tokens=128, temperature=0.8, seed=1)
    result = await Orchestrator(backend, defaults=sampling).run(
        build_strategy("ffs", {"n": 8}), Problem(question="What is 17 + 25?")
    )
    after = await idle(before["vllm:kv_cache_usage_perc"])
    assert result.stop_reason == "done" and result.usage.num_cancelled > 0
    assert after["vllm:num_requests_running"] == 0
    generated = after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"]
    assert (
        result.usage.total_tokens <= generated <= result.usage.total_tokens + 16 * result.usage.num_cancelled
    )


def test_a_clean_exit_prints_nothing(model_dir: str) -> None:
    script = textwrap.dedent(
        f"""
        import anyio
        from paragen.backends.base import generate
        from paragen.backends.vllm import VLLMBackend
        from paragen.types import GenerateRequest, SamplingParams

        async def main():
            backend = VLLMBackend.from_spec({model_dir!r}, **{ENGINE_OPTIONS!r})
            request = GenerateRequest(prompt="1, 2,", params=SamplingParams(max_tokens=3))
            [c] = await generate(backend, request)
            assert c.num_tokens == 3
            await backend.aclose()

        anyio.run(main)
        """
    )
    env = {**vllm_env(), "VLLM_LOGGING_LEVEL": "ERROR"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr[-3000:]


class _BudgetConfig(StrategyConfig):
    thinking_budget: int | None = None


class _ThinkingSample(BaseStrategy[_BudgetConfig]):
    """One raw completion of the problem's question (a prompt that opens the thinking), with the
    configured thinking budget; its trace as the run split it."""

    name = "thinking_sample"
    Config = _BudgetConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        request = ctx.request(prompt=problem.question, thinking_budget=self.config.thinking_budget)
        trace = await ctx.sample(request)
        return ctx.finish(None, text=trace.text, reasoning=trace.reasoning)


async def _think(backend: VLLMBackend, prompt: str, budget: int | None) -> Trace:
    defaults = SamplingParams(max_tokens=48, temperature=0.0)
    strategy = _ThinkingSample(thinking_budget=budget)
    result = await Orchestrator(backend, defaults=defaults).run(strategy, Problem(question=prompt))
    return result.traces[0]


async def test_a_thinking_budget_ends_the_thinking_in_the_engine(backend: VLLMBackend) -> None:
    """The chat as SmolLM2's template renders it, the reply opened by ``<think>\\n`` (as
    DeepSeek-R1's template opens it): the engine ends the thinking at the budget, the answer
    follows; without a budget the same greedy sample thinks on and never closes it."""
    assert backend.capabilities.thinking_budget
    tokenizer = await backend.tokenizer()
    chat = [m.model_dump() for m in solve_messages("What is 6 times 7?")]
    prompt = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) + "<think>\n"
    budgeted = await _think(backend, prompt, BUDGET)
    plain = await _think(backend, prompt, None)
    thought, _ = await backend.count_tokens(budgeted.reasoning)
    closing, _ = await backend.count_tokens("</think>")
    assert budgeted.thinking == "closed" and budgeted.text.strip()
    assert BUDGET <= thought <= BUDGET + OVERRUN
    # Split by delimiters: the piece that holds the end of the thinking counts to the thinking.
    assert budgeted.reasoning_tokens == thought + closing and budgeted.reasoning_count_source == "token_ids"
    assert plain.thinking == "open" and plain.reasoning_tokens == plain.completion_tokens > BUDGET + OVERRUN
    assert plain.reasoning.startswith(budgeted.reasoning)  # greedy: the same thought, cut


def test_a_bad_reasoning_config_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="reasoning_config"):
        with_reasoning_config({"reasoning_config": {"reasoning_start": "<think>"}})
