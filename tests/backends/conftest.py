"""Shared fixtures of the backend tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from openai_fakes import FakeServer
from otlp_receiver import Receiver


@pytest.fixture
def server() -> FakeServer:
    return FakeServer()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """An OTLP/HTTP trace receiver on loopback, for the test's lifetime."""
    server = Receiver()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()
