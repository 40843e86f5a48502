"""Shared fixtures of the backend tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from openai_fakes import FakeServer
from otlp_receiver import Receiver
from real_servers import Server, start_vllm


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


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One plain `vllm serve` of SmolLM2 for every module that needs no server flags: a vLLM start
    costs a minute or more of a 2-core CI machine, and the tests read only their own requests' counts."""
    server = start_vllm(tmp_path_factory.mktemp("vllm") / "server.log")
    yield server
    server.stop()
