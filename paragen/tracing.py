"""Tracing hooks: OpenTelemetry spans for a run's tree, off unless configured, free when off.

A run is a tree of spans: the run, its phases (a PDR round, a beam-search step: ``ctx.phase``), its
traces (samples, probes, judges, scores, tool calls: one span each, the cancelled ones marked with
``paragen.status`` and ``paragen.cancel_reason``), and under each sample the backend's HTTP requests
(``chat MODEL`` client spans, whose W3C ``traceparent`` header lets the server's own spans join the
tree). ``paragen serve`` continues the trace of an incoming request's ``traceparent``.

Off, :data:`active` is None: every hook in the core is one ``if``, and nothing of OpenTelemetry is
imported. :func:`configure` turns it on where the environment asks for it (OpenTelemetry's own
``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, unless ``OTEL_SDK_DISABLED``
or ``OTEL_TRACES_EXPORTER=none``) or a CLI flag names an endpoint (``--otlp-endpoint URL``); spans
then go to that OTLP/HTTP endpoint, configured by the standard ``OTEL_*`` variables (service name,
headers, timeouts). :func:`enable` takes an OpenTelemetry ``TracerProvider`` of the caller's (tests:
an in-memory exporter). The implementation is :mod:`paragen._otel` (the ``paragen[otel]`` extra).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from paragen.errors import ConfigError

if TYPE_CHECKING:
    from paragen.types import GenerateRequest, StrategyResult, Trace, Usage


class RunSpan(Protocol):
    def ended(self, result: StrategyResult) -> None: ...


class RequestSpan(Protocol):
    def headers(self, base: dict[str, str]) -> dict[str, str]: ...

    def ended(self, usage: Usage, error: BaseException | None) -> None: ...


class Tracer(Protocol):
    """What the core calls; :class:`paragen._otel.OTelTracer` is the one implementation."""

    def run(self, strategy: str, problem_id: str) -> AbstractContextManager[RunSpan]: ...

    def phase(self, name: str, attributes: dict[str, Any]) -> AbstractContextManager[None]: ...

    def trace_started(self, trace: Trace) -> None: ...

    def trace_ended(self, trace: Trace) -> None: ...

    def current(self, trace: Trace) -> AbstractContextManager[None]: ...

    def request(self, operation: str, model: str, url: str, request: GenerateRequest) -> RequestSpan: ...

    def asgi(self, app: Any) -> Any:
        """``app`` (ASGI) wrapped: a server span per HTTP request, continuing its ``traceparent``."""
        ...

    def shutdown(self) -> None: ...


active: Tracer | None = None
"""The tracer the core reports to; None: tracing is off."""

# Set in a block whose runs are not the user's (preflight's dry run of each strategy): their spans
# would stand beside the real run's in the exported trace. A context variable, so it covers the
# block's child tasks and nothing else running at the same time.
_muted: ContextVar[bool] = ContextVar("paragen_tracing_muted", default=False)

_NOTHING = contextlib.nullcontext()


def tracer() -> Tracer | None:
    """The tracer to report to here: ``active``, unless this task is inside :func:`muted`."""
    return None if _muted.get() else active


@contextlib.contextmanager
def muted() -> Iterator[None]:
    """A block whose runs report nothing to the tracer."""
    token = _muted.set(True)
    try:
        yield
    finally:
        _muted.reset(token)


def current(trace: Trace) -> AbstractContextManager[Any]:
    """A block in which ``trace``'s span is the current one (its backend requests become its children)."""
    found = tracer()
    return _NOTHING if found is None else found.current(trace)


def phase(name: str, attributes: dict[str, Any]) -> AbstractContextManager[Any]:
    found = tracer()
    return _NOTHING if found is None else found.phase(name, attributes)


def enable(provider: Any = None, *, endpoint: str | None = None) -> Tracer:
    """Turn tracing on: spans to ``provider`` (an OpenTelemetry TracerProvider), or to a new one that
    exports over OTLP/HTTP (to ``endpoint``, else where the OTEL_* variables say)."""
    global active
    check_endpoints(endpoint)
    try:
        from paragen._otel import OTelTracer
    except ImportError as exc:
        raise ConfigError(
            f"tracing needs OpenTelemetry ({exc.name} is not installed)", hint="pip install 'paragen[otel]'"
        ) from None
    active = OTelTracer(provider, endpoint=endpoint)
    return active


def disable() -> None:
    """Turn tracing off, flushing what the tracer holds."""
    global active
    tracer, active = active, None
    if tracer is not None:
        tracer.shutdown()


def configure(endpoint: str | None = None) -> Tracer | None:
    """Tracing as the flag (an OTLP/HTTP endpoint) or the OTEL_* environment asks; None: off."""
    if endpoint is None and not wanted_by_environment():
        return None
    return enable(endpoint=endpoint)


def wanted_by_environment(environ: dict[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def check_endpoints(endpoint: str | None, environ: dict[str, str] | None = None) -> None:
    """A ConfigError where the endpoint spans would go to is no http(s) URL: ``endpoint`` (the
    ``--otlp-endpoint`` flag) or, without it, the OTEL_* variables the exporter reads."""
    if endpoint is not None:
        _check_url(endpoint, "--otlp-endpoint")
        return
    env = os.environ if environ is None else environ
    for name in ENDPOINT_VARIABLES:
        if env.get(name):
            _check_url(env[name], name)


def _check_url(url: str, where: str) -> None:
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"bad {where} {url!r}: an http(s) URL, e.g. http://localhost:4318")


@contextlib.contextmanager
def configured(endpoint: str | None = None) -> Iterator[Tracer | None]:
    """Tracing on for the block where asked (see :func:`configure`), flushed and off after it."""
    tracer = configure(endpoint)
    try:
        yield tracer
    finally:
        if tracer is not None:
            disable()


__all__ = ["RequestSpan", "RunSpan", "Tracer", "active", "configure", "configured", "disable", "enable"]
