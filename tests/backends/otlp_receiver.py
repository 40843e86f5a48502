"""A minimal OTLP/HTTP trace receiver on loopback for the tests (the OpenTelemetry Collector is a binary
outside the package registries): it takes ``POST /v1/traces`` bodies as protobuf and keeps them, read
back with OpenTelemetry's own message types."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


class Receiver(http.server.ThreadingHTTPServer):
    """Takes POST /v1/traces (OTLP/HTTP, protobuf) and keeps what it read."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.exports: list[tuple[str, ExportTraceServiceRequest]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def spans(self) -> list[Any]:
        return [
            s for _, e in self.exports for r in e.resource_spans for ss in r.scope_spans for s in ss.spans
        ]

    def services(self) -> set[str]:
        found = set()
        for _, export in self.exports:
            for resource in export.resource_spans:
                for kv in resource.resource.attributes:
                    if kv.key == "service.name":
                        found.add(kv.value.string_value)
        return found


@contextlib.contextmanager
def running_receiver() -> Iterator[Receiver]:
    """A receiver serving on a thread of its own until the block ends."""
    receiver = Receiver()
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    try:
        yield receiver
    finally:
        receiver.shutdown()
        receiver.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        export = ExportTraceServiceRequest()
        export.ParseFromString(body)
        self.server.exports.append((self.path, export))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass
