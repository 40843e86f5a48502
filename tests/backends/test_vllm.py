"""The in-process vLLM adapter's mapping, against a stand-in engine written to vLLM's AsyncLLM API
(generate / abort / get_tokenizer): fast, and it runs without vLLM. The same contract against
vLLM's real AsyncLLM is tested in test_vllm_inprocess.py (in the vLLM venv)."""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

import pytest

from paragen.backends.base import generate
from paragen.backends.vllm import VLLMBackend, VLLMConfig
from paragen.errors import ConfigError
from paragen.types import ChatMessage, GenerateRequest, SamplingParams


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed")
def test_without_vllm_the_error_says_how_to_install_it() -> None:
    with pytest.raises(ConfigError) as info:
        VLLMBackend.from_spec("Qwen/Qwen3-0.6B")
    assert "pip install 'paragen[vllm]'" in info.value.one_line()


def test_bad_options_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="gpu_memory_utilisation"):
        VLLMBackend.from_spec("m", gpu_memory_utilisation=0.5)
    with pytest.raises(ConfigError, match="needs a model"):
        VLLMBackend.from_spec(None)


def test_engine_kwargs() -> None:
    config = VLLMConfig(model="m", max_model_len=4096, engine_args={"swap_space": 0})
    kwargs = config.to_engine_kwargs()
    assert kwargs["model"] == "m" and kwargs["max_model_len"] == 4096 and kwargs["swap_space"] == 0
    assert "tokenizer" not in kwargs and kwargs["enable_prefix_caching"] is True
    reasoning = VLLMConfig(model="m", reasoning_parser="qwen3", thinking="think_open").to_engine_kwargs()
    assert reasoning["reasoning_parser"] == "qwen3" and "thinking" not in reasoning  # not an engine arg
    assert "reasoning_config" not in reasoning


@dataclass
class Logprob:
    logprob: float


@dataclass
class FakeEngine:
    """Answers every request with the tokens 1, 2, 3 ("a", "b", "c"), one per step, per choice."""

    aborted: list[str] = field(default_factory=list)
    calls: list[tuple[str, Any, str]] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)
    vllm_config: Any = None  # what AsyncLLM was built with; only its reasoning_config is read

    async def generate(self, prompt: str, params: Any, request_id: str) -> AsyncGenerator[Any, None]:
        self.calls.append((prompt, params, request_id))
        n, k = params.kwargs["n"], params.kwargs["logprobs"]
        try:
            for step, (tid, text) in enumerate([(1, "a"), (2, "b"), (3, "c")]):
                last = step == 2
                lps = [{tid: Logprob(-0.5), 9: Logprob(-0.1), 8: Logprob(-3.0)}] if k is not None else None
                outputs = [
                    types.SimpleNamespace(
                        index=i,
                        text=text,
                        token_ids=[tid],
                        logprobs=lps,
                        finish_reason="length" if last else None,
                    )
                    for i in range(n)
                ]
                yield types.SimpleNamespace(
                    outputs=outputs, prompt_token_ids=[7, 7], num_cached_tokens=1, finished=last
                )
        except GeneratorExit:
            self.closed.append(request_id)
            raise

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    async def get_tokenizer(self) -> Any:
        def template(messages: list[dict[str, str]], **kwargs: Any) -> str:
            return "|".join(m["content"] for m in messages) + f"|{sorted(kwargs.items())}"

        return types.SimpleNamespace(apply_chat_template=template, encode=lambda text, **kw: text.split())


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    vllm = types.ModuleType("vllm")
    vllm.SamplingParams = lambda **kwargs: types.SimpleNamespace(kwargs=kwargs)  # type: ignore[attr-defined]
    sampling = types.ModuleType("vllm.sampling_params")
    sampling.RequestOutputKind = types.SimpleNamespace(DELTA="delta")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", sampling)


@pytest.mark.anyio
@pytest.mark.usefixtures("fake_vllm")
async def test_streams_deltas_with_exact_counts() -> None:
    engine = FakeEngine()
    backend = VLLMBackend(VLLMConfig(model="m"), engine=engine)
    params = SamplingParams(max_tokens=3, top_k=0, stop=("\n",), top_logprobs=2, seed=5)
    async with backend.stream(GenerateRequest(prompt="p", params=params, n=2)) as stream:
        deltas = [d async for d in stream]
        usage = stream.usage
    assert [(d.index, d.text, d.token_ids) for d in deltas[:2]] == [(0, "a", (1,)), (1, "a", (1,))]
    assert deltas[0].logprobs == (-0.5,) and deltas[0].top_logprobs == ((-0.1, -0.5),)
    # The prompt counts once per choice; each choice says how much of it was cached.
    assert (usage.prompt_tokens, usage.cached_prompt_tokens, usage.completion_tokens) == (4, 2, 6)
    assert usage.source == "token_ids" and deltas[-1].finish_reason == "length"
    sent = engine.calls[0][1].kwargs
    assert (
        sent["top_k"] == -1
        and sent["stop"] == ["\n"]
        and sent["logprobs"] == 2
        and sent["output_kind"] == "delta"
    )
    assert engine.aborted == []


@pytest.mark.anyio
@pytest.mark.usefixtures("fake_vllm")
async def test_early_exit_aborts_the_request() -> None:
    engine = FakeEngine()
    backend = VLLMBackend(VLLMConfig(model="m"), engine=engine)
    async with backend.stream(GenerateRequest(prompt="p")) as stream:
        async for _ in stream:
            break
    request_id = engine.calls[0][2]
    assert engine.closed == [request_id] and engine.aborted == [request_id]


@pytest.mark.anyio
@pytest.mark.usefixtures("fake_vllm")
async def test_chat_uses_the_template_and_continues_the_final_message() -> None:
    engine = FakeEngine()
    backend = VLLMBackend(VLLMConfig(model="m"), engine=engine)
    messages = (ChatMessage(role="user", content="q"), ChatMessage(role="assistant", content="a"))
    [completion] = await generate(backend, GenerateRequest(messages=messages, continue_final=True))
    assert completion.text == "abc"
    assert (
        engine.calls[0][0]
        == "q|a|[('add_generation_prompt', False), ('continue_final_message', True), ('tokenize', False)]"
    )
    assert await backend.count_tokens("one two") == (2, "tokenizer")


@pytest.mark.anyio
@pytest.mark.usefixtures("fake_vllm")
async def test_a_thinking_budget_reaches_only_an_engine_that_enforces_it() -> None:
    reasoning = types.SimpleNamespace(reasoning_config=types.SimpleNamespace(enabled=True))
    budgeted = VLLMBackend(
        VLLMConfig(model="m", thinking="think_open"), engine=FakeEngine(vllm_config=reasoning)
    )
    plain = VLLMBackend(VLLMConfig(model="m"), engine=FakeEngine())
    assert budgeted.capabilities.thinking_budget and budgeted.capabilities.thinking == "think_open"
    assert not plain.capabilities.thinking_budget and plain.capabilities.thinking == "think"
    request = GenerateRequest(prompt="p", thinking_budget=7)
    await generate(budgeted, request)
    await generate(plain, request)
    await generate(budgeted, GenerateRequest(prompt="p"))
    sent = [b.engine.calls[i][1].kwargs for b, i in ((budgeted, 0), (plain, 0), (budgeted, 1))]
    assert sent[0]["thinking_token_budget"] == 7
    # vLLM refuses a budget it has no reasoning config for; a request without one sends none.
    assert "thinking_token_budget" not in sent[1] and "thinking_token_budget" not in sent[2]
