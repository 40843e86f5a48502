"""A real `vllm serve` (vLLM's CPU build, its tracing on) joins paragen's trace: the OpenAI backend's
``traceparent`` header makes vLLM's own request span a child of paragen's ``chat`` client span, in
the same trace. paragen's spans go to an in-memory exporter; vLLM's to an OTLP/HTTP receiver here
(the shared server of conftest.py, started with its tracing on)."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from otlp_receiver import Receiver
from real_servers import Server

from paragen import Orchestrator, Problem, tracing
from paragen.backends.openai import OpenAIBackend
from paragen.strategy import build_strategy
from paragen.types import SamplingParams


@pytest.fixture
def anyio_backend() -> str:
    # asyncio only for now: these tests share one `vllm serve` per module and read its metrics, and
    # their trio runs have not been checked against that shared server yet.
    return "asyncio"


pytestmark = [pytest.mark.server, pytest.mark.vllm_server, pytest.mark.anyio]


async def test_vllms_request_spans_are_children_of_paragens_requests(
    vllm_server: Server, vllm_traces: Receiver
) -> None:
    server, receiver = vllm_server, vllm_traces
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider)
    try:
        backend = OpenAIBackend.from_spec(server.url, api_key_env=None)
        sampling = SamplingParams(max_tokens=16, temperature=0.7, seed=3)
        result = await Orchestrator(backend, defaults=sampling).run(
            build_strategy("majority", {"n": 2}), Problem(question="What is 2 + 2?")
        )
        await backend.aclose()
    finally:
        tracing.disable()
    ours = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.CLIENT]
    assert len(ours) == 2 and result.usage.num_samples == 2
    ids = {(s.context.trace_id, s.context.span_id) for s in ours if s.context is not None}
    # The receiver is the session's: the other tests' requests are there too, in traces of their own.
    traces = {trace_id for trace_id, _ in ids}

    def in_our_traces() -> list[Any]:
        spans = [s for s in receiver.spans() if s.name == "llm_request"]
        return [s for s in spans if int.from_bytes(s.trace_id, "big") in traces]

    deadline = time.monotonic() + 30  # vLLM batches its spans (5 s by default)
    while len(theirs := in_our_traces()) < 2:
        assert time.monotonic() < deadline, sorted({s.name for s in receiver.spans()})
        await anyio.sleep(0.2)
    parents = {(int.from_bytes(s.trace_id, "big"), int.from_bytes(s.parent_span_id, "big")) for s in theirs}
    assert parents == ids  # each of vLLM's request spans hangs under the paragen request that caused it
