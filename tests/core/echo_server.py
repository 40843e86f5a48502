"""A real OpenAI-shaped HTTP server on loopback that fails on purpose, for the bad-input and secrets tests.

Paths (the base URL a test gives the backend picks the behaviour):

- ``/v1/models`` and ``/<mode>/v1/models``: a model list (so the backend's probe passes).
- ``/cycle/v1/...`` (completions): each request gets the next of ``FAILURES`` in turn: an error
  status whose body echoes the request's Authorization header back, as some servers and proxies
  do, or a 200 event stream whose error event echoes it.
- ``/failprobe/...``: 503 (the probe fails), echoing the header.
- anything else: 404, also echoing the header.

Every Authorization header the server saw is kept in ``seen_auth`` (so a test can show the key
really was sent, and so the redaction it checks is not vacuous).
"""

from __future__ import annotations

import http.server
import itertools
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

FAILURES: tuple[int | str, ...] = (400, 401, 429, 500, 503, "stream")


class EchoServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen_auth: list[str] = []
        self.failures = itertools.cycle(FAILURES)
        self.lock = threading.Lock()

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def next_failure(self) -> int | str:
        with self.lock:
            return next(self.failures)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: EchoServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        auth = self.headers.get("Authorization", "")
        with self.server.lock:
            self.server.seen_auth.append(auth)
        if self.path.startswith("/failprobe/"):
            self._json(503, _echo(auth, "probe refused"))
        elif self.path.endswith("/v1/models"):
            self._json(200, {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "test"}]})
        elif self.path.startswith("/cycle/v1/"):
            failure = self.server.next_failure()
            if failure == "stream":
                self._stream_error(auth)
            else:
                self._json(int(failure), _echo(auth, f"status {failure}"))
        else:
            self._json(404, _echo(auth, "no such route"))

    def _json(self, status: int, payload: Any) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _stream_error(self, auth: str) -> None:
        event = f"data: {json.dumps(_echo(auth, 'in stream'))}\n\ndata: [DONE]\n\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(event)))
        self.end_headers()
        self.wfile.write(event)

    def log_message(self, *args: Any) -> None:
        return None


def _echo(auth: str, what: str) -> dict[str, Any]:
    return {"error": {"message": f"{what}: you sent Authorization: {auth}", "type": "echo"}}


@contextmanager
def echo_server() -> Iterator[EchoServer]:
    server = EchoServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
