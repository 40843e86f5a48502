"""Dynasor's probes on a real `vllm serve` (vLLM's CPU build): a probe continues the sample's text,
and vLLM serves that prefix from its prefix cache (its cached-prompt count is the witness)."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import pytest
from real_servers import Server

from paragen.backends.base import CompletionStream
from paragen.backends.openai import OpenAIBackend
from paragen.orchestrator import Orchestrator
from paragen.types import GenerateRequest, Problem, SamplingParams
from strategies.dynasor import PROBE_TEXT, Dynasor


@pytest.fixture
def anyio_backend() -> str:
    # asyncio only for now: these tests share one `vllm serve` per module and read its metrics, and
    # their trio runs have not been checked against that shared server yet.
    return "asyncio"


pytestmark = [pytest.mark.server, pytest.mark.vllm_server, pytest.mark.anyio]

BLOCK = 128  # vLLM's KV block on its CPU backend: only whole blocks are cached
QUESTION = "Fruit, one per line:\n" + "apple\npear\nplum\n" * 60 + "\nHow many lines name a pear?"


async def test_probes_continue_the_sample_and_hit_the_prefix_cache(vllm_server: Server) -> None:
    backend = OpenAIBackend.from_spec(vllm_server.url, api_key_env=None)
    sent: list[GenerateRequest] = []
    stream = backend.stream

    def recording(request: GenerateRequest) -> AbstractAsyncContextManager[CompletionStream]:
        sent.append(request)
        return stream(request)

    backend.stream = recording  # type: ignore[method-assign,assignment]
    strategy = Dynasor(interval=16, probe_tokens=8, agree=2)
    sampling = SamplingParams(max_tokens=96, temperature=0.0)
    result = await Orchestrator(backend, defaults=sampling).run(strategy, Problem(question=QUESTION))
    await backend.aclose()
    assert result.stop_reason == "done", result.error
    sample = next(t for t in result.traces if t.kind == "sample")
    probes = [t for t in result.traces if t.kind == "probe"]
    asked = [r for r in sent if r.continue_final]
    assert probes and len(asked) == len(probes)
    assert [p.meta["at"] for p in probes] == [16 * (i + 1) for i in range(len(probes))]
    for request, probe in zip(asked, probes, strict=True):
        assert request.messages is not None and request.messages[:-1] == sent[0].messages
        so_far = request.messages[-1].content
        assert so_far.endswith(PROBE_TEXT) and sample.text.startswith(so_far.removesuffix(PROBE_TEXT))
        assert probe.parents == [sample.id] and probe.completion_tokens <= 8
        # vLLM served the sample's prompt (and more) from its prefix cache: only a tail was encoded.
        cached = probe.cached_prompt_tokens or 0
        assert cached >= BLOCK and probe.prompt_tokens - cached < BLOCK + 16
    assert result.usage.probe_tokens == sum(p.completion_tokens for p in probes)
    assert vllm_server.wait_idle()["vllm:num_requests_running"] == 0
