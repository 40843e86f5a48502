"""W3C trace context through ``paragen serve``: continued from the client's ``traceparent``, and passed
on to the backend's HTTP requests, so the spans of an inner ``paragen serve`` (standing in for a vLLM
server with tracing on) join the one tree. Spans go to an in-memory exporter shared by both servers."""

from __future__ import annotations

import time
from typing import Any

import httpx
from conftest import counting_responder, serving
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from paragen.backends.openai import OpenAIBackend
from paragen.backends.scripted import ScriptedBackend
from paragen.types import StrategyResult

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


def attr(span: ReadableSpan, name: str) -> Any:
    assert span.attributes is not None
    return span.attributes.get(name)


def parent_of(span: ReadableSpan, spans: list[ReadableSpan]) -> ReadableSpan | None:
    assert span.parent is not None
    found = [s for s in spans if s.context is not None and s.context.span_id == span.parent.span_id]
    return found[0] if found else None


def test_one_tree_from_the_client_through_both_servers(exporter: InMemorySpanExporter) -> None:
    with serving(ScriptedBackend(counting_responder)) as inner:
        backend = OpenAIBackend.from_spec(inner, model="scripted", api_key_env=None)
        with serving(backend, close_backend=True) as outer:
            body: dict[str, Any] = {
                "model": "majority-2/scripted",
                "messages": [{"role": "user", "content": "7 + 5?"}],
                "paragen": {"include_result": True},
            }
            headers = {"traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"}
            reply = httpx.post(outer + "/chat/completions", json=body, headers=headers, timeout=30)
            assert reply.status_code == 200, reply.text
            deadline = time.monotonic() + 10
            while len(servers := [s for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER]) < 4:
                assert time.monotonic() < deadline, [s.name for s in exporter.get_finished_spans()]
                time.sleep(0.02)
    result = StrategyResult.model_validate(reply.json()["choices"][0]["paragen"]["result"])
    everything = list(exporter.get_finished_spans())
    spans = [s for s in everything if s.context is not None and f"{s.context.trace_id:032x}" == TRACE_ID]
    others = sorted({s.name for s in everything if s not in spans})
    assert others == ["GET /v1/models"]  # the outer server's probe of the inner one, at its start

    [outer_server] = [
        s for s in servers if s.parent is not None and f"{s.parent.span_id:016x}" == CALLER_SPAN
    ]
    assert (
        outer_server.name == "POST /v1/chat/completions"
        and attr(outer_server, "http.response.status_code") == 200
    )
    [run] = [s for s in spans if s.name == "run majority"]
    assert parent_of(run, spans) is outer_server
    samples = [s for s in spans if s.name == "sample" and parent_of(s, spans) is run]
    assert len(samples) == 2
    requests = [s for s in spans if s.kind == SpanKind.CLIENT]
    assert len(requests) == 2 and all(parent_of(r, spans) in samples for r in requests)
    for request in requests:
        assert request.name == "chat scripted" and attr(request, "gen_ai.operation.name") == "chat"
        assert (
            attr(request, "gen_ai.request.model") == "scripted"
            and attr(request, "server.address") == "127.0.0.1"
        )
        sample = parent_of(request, spans)
        assert sample is not None
        assert attr(request, "gen_ai.usage.output_tokens") == attr(sample, "gen_ai.usage.output_tokens") > 0
        # The inner server continued the request's context: its server span is the request's child.
        assert request.context is not None
        here = request.context.span_id
        [inner_server] = [s for s in servers if s.parent is not None and s.parent.span_id == here]
        [inner_run] = [
            s for s in spans if s.name == "run passthrough" and parent_of(s, spans) is inner_server
        ]
        assert attr(inner_run, "gen_ai.usage.output_tokens") == attr(request, "gen_ai.usage.output_tokens")
    assert sum(attr(s, "gen_ai.usage.output_tokens") for s in samples) == result.usage.total_tokens
