"""A server that resets the connection mid-stream: the error names the cause.

httpx raises a reset while reading as a ReadError whose text is empty, so the message built from
``str(exc)`` alone read "connection failed: " with nothing after the colon. The server here is a
real loopback socket that sends one chunk of the event stream and then resets (SO_LINGER 0), as
a crashed server or a proxy dropping the connection does.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections.abc import Iterator

import pytest
from openai_fakes import chunk

from paragen.backends.base import generate
from paragen.backends.openai import OpenAIBackend
from paragen.errors import BackendConnectionError
from paragen.types import GenerateRequest

pytestmark = pytest.mark.anyio

MODELS = json.dumps({"data": [{"id": "m", "owned_by": "vllm"}]}).encode()


def _read_request(conn: socket.socket) -> bytes:
    """The request line and headers; the body (Content-Length bytes) read and dropped."""
    data = b""
    while b"\r\n\r\n" not in data:
        piece = conn.recv(65536)
        if not piece:
            return b""
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        ),
        0,
    )
    while len(body) < length:
        body += conn.recv(65536)
    return head


def _serve(conn: socket.socket) -> None:
    with conn:
        head = _read_request(conn)
        if head.startswith(b"GET"):
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n"
                + f"content-length: {len(MODELS)}\r\n\r\n".encode()
                + MODELS
            )
            return
        event = f"data: {json.dumps(chunk('4'))}\n\n".encode()
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            + f"{len(event):x}\r\n".encode()
            + event
            + b"\r\n"
        )
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST


@pytest.fixture
def resetting_server() -> Iterator[str]:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # the listener was closed: the test is over
                return
            threading.Thread(target=_serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}/v1"
    listener.close()
    thread.join(timeout=5)


async def test_a_reset_mid_stream_says_what_failed(resetting_server: str) -> None:
    backend = OpenAIBackend.from_spec(resetting_server, api_key_env=None, max_retries=0)
    try:
        with pytest.raises(BackendConnectionError) as info:
            await generate(backend, GenerateRequest(prompt="What is 2 + 2?"))
    finally:
        await backend.aclose()
    message = str(info.value)
    assert "connection failed: " in message, message
    cause = message.split("connection failed: ", 1)[1]
    assert cause.strip(), message  # something after the colon
    assert "reset" in cause.lower(), message  # the socket's own words, found under the empty ReadError
