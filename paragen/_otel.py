"""The OpenTelemetry side of :mod:`paragen.tracing` (imported only when tracing is turned on).

Names follow OpenTelemetry's GenAI semantic conventions where they cover the thing (``chat MODEL``
client spans; ``gen_ai.usage.input_tokens`` / ``output_tokens``, ``gen_ai.request.*``,
``gen_ai.response.finish_reasons``); paragen's own attributes are ``paragen.*`` (strategy,
problem id, trace id, label, kind, status, cancel and stop reasons, the run's accounting).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import context, propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from paragen.types import GenerateRequest, StrategyResult, Trace, Usage

_SCOPE = "paragen"


def _provider(endpoint: str | None) -> TracerProvider:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    if endpoint is not None:  # the flag: OTLP/HTTP's path for traces under the given base
        endpoint = endpoint.rstrip("/") + (
            "" if endpoint.rstrip("/").endswith("/v1/traces") else "/v1/traces"
        )
    resource = Resource.create()  # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, where set
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "paragen"}))
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return provider


class OTelTracer:
    """Spans of runs, phases, traces and backend requests (see paragen.tracing)."""

    def __init__(self, provider: Any = None, *, endpoint: str | None = None) -> None:
        self.provider = provider if provider is not None else _provider(endpoint)
        self._owned = provider is None
        self._tracer = self.provider.get_tracer(_SCOPE)
        self._spans: dict[int, Span] = {}  # id(trace) -> its span, while the trace runs

    @contextlib.contextmanager
    def run(self, strategy: str, problem_id: str) -> Iterator[_RunSpan]:
        attributes = {"paragen.strategy": strategy, "paragen.problem_id": problem_id}
        span = self._tracer.start_span(f"run {strategy}", attributes=attributes)
        with trace.use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
            try:
                yield _RunSpan(span)
            except BaseException as exc:
                _failed(span, exc)
                raise

    @contextlib.contextmanager
    def phase(self, name: str, attributes: dict[str, Any]) -> Iterator[None]:
        values = {f"paragen.{k}": v for k, v in attributes.items()}
        with self._tracer.start_as_current_span(name, attributes=values, record_exception=False):
            yield

    def trace_started(self, trace_: Trace) -> None:
        kind = trace_.kind
        name = f"execute_tool {trace_.label}" if kind == "tool" else kind
        attributes: dict[str, Any] = {
            "paragen.trace_id": trace_.id,
            "paragen.label": trace_.label,
            "paragen.kind": kind,
        }
        if kind == "tool":
            attributes.update({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": trace_.label})
        self._spans[id(trace_)] = self._tracer.start_span(name, attributes=attributes)

    def trace_ended(self, trace_: Trace) -> None:
        span = self._spans.pop(id(trace_), None)
        if span is None:
            return
        attributes: dict[str, Any] = {
            "paragen.status": trace_.status,
            "gen_ai.usage.input_tokens": trace_.prompt_tokens,
            "gen_ai.usage.output_tokens": trace_.completion_tokens,
        }
        if trace_.cancel_reason is not None:
            attributes["paragen.cancel_reason"] = trace_.cancel_reason
        if trace_.finish_reason is not None:
            attributes["gen_ai.response.finish_reasons"] = [trace_.finish_reason]
        if trace_.hedged_tokens:
            attributes["paragen.hedged_tokens"] = trace_.hedged_tokens
        span.set_attributes(attributes)
        if trace_.status == "error":
            span.set_status(Status(StatusCode.ERROR, trace_.error or "error"))
        span.end()

    def current(self, trace_: Trace) -> contextlib.AbstractContextManager[Any]:
        span = self._spans.get(id(trace_))
        if span is None:
            return contextlib.nullcontext()
        return trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False)

    def request(self, operation: str, model: str, url: str, request: GenerateRequest) -> _RequestSpan:
        params, where = request.params, urlsplit(url)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": model,
            "gen_ai.request.max_tokens": params.max_tokens,
            "gen_ai.request.temperature": params.temperature,
            "gen_ai.request.top_p": params.top_p,
            "server.address": where.hostname or "",
            "server.port": where.port or (443 if where.scheme == "https" else 80),
        }
        if params.seed is not None:
            attributes["gen_ai.request.seed"] = params.seed
        if request.n > 1:
            attributes["gen_ai.request.choice.count"] = request.n
        span = self._tracer.start_span(f"{operation} {model}", kind=SpanKind.CLIENT, attributes=attributes)
        return _RequestSpan(span)

    def asgi(self, app: ASGIApp) -> ServerSpans:
        return ServerSpans(app, self._tracer)

    def shutdown(self) -> None:
        if self._owned:
            self.provider.shutdown()
        else:
            self.provider.force_flush()


class _RunSpan:
    __slots__ = ("_span",)

    def __init__(self, span: Span) -> None:
        self._span = span

    def ended(self, result: StrategyResult) -> None:
        usage = result.usage
        self._span.set_attributes(
            {
                "paragen.stop_reason": result.stop_reason,
                "gen_ai.usage.input_tokens": usage.prompt_tokens,
                "gen_ai.usage.output_tokens": usage.total_tokens,
                "paragen.usage.sequential_tokens": usage.sequential_tokens,
                "paragen.usage.wasted_tokens": usage.wasted_tokens,
                "paragen.usage.judge_tokens": usage.judge_tokens,
                "paragen.usage.score_tokens": usage.score_tokens,
                "paragen.usage.num_samples": usage.num_samples,
                "paragen.usage.num_cancelled": usage.num_cancelled,
            }
        )
        if result.stop_reason == "error":
            self._span.set_status(Status(StatusCode.ERROR, result.error or "error"))


class _RequestSpan:
    """One HTTP request to a model server: the span, and the headers that carry its context."""

    __slots__ = ("_span",)

    def __init__(self, span: Span) -> None:
        self._span = span

    def headers(self, base: dict[str, str]) -> dict[str, str]:
        headers = dict(base)
        propagate.inject(headers, context=trace.set_span_in_context(self._span))
        return headers

    def ended(self, usage: Usage, error: BaseException | None) -> None:
        span = self._span
        span.set_attributes(
            {
                "gen_ai.usage.input_tokens": usage.prompt_tokens,
                "gen_ai.usage.output_tokens": usage.completion_tokens,
            }
        )
        if error is not None:
            _failed(span, error)
        span.end()


def _failed(span: Span, exc: BaseException) -> None:
    if isinstance(exc, Exception):
        span.set_attribute("error.type", type(exc).__name__)
        span.set_status(
            Status(StatusCode.ERROR, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        )
    else:  # cancelled from outside (a client went away): not an error of the run's
        span.set_attribute("paragen.cancelled", True)


class ServerSpans:
    """ASGI middleware of ``paragen serve``: one server span per HTTP request, continuing the
    trace of the request's W3C ``traceparent`` header."""

    def __init__(self, app: ASGIApp, tracer: trace.Tracer) -> None:
        self.app = app
        self._tracer = tracer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        parent = propagate.extract(carrier)
        method, path = scope["method"], scope["path"]
        attributes = {"http.request.method": method, "url.path": path}
        span = self._tracer.start_span(
            f"{method} {path}", context=parent, kind=SpanKind.SERVER, attributes=attributes
        )
        token = context.attach(trace.set_span_in_context(span, parent))

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                span.set_attribute("http.response.status_code", message["status"])
                if message["status"] >= 500:
                    span.set_status(Status(StatusCode.ERROR))
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            span.end()
            context.detach(token)
