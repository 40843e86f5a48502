"""Shared fixtures of the backend tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openai_fakes import FakeServer
from otlp_receiver import Receiver, running_receiver
from real_servers import Server, start_vllm


@pytest.fixture
def server() -> FakeServer:
    return FakeServer()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """An OTLP/HTTP trace receiver on loopback, for the test's lifetime."""
    with running_receiver() as receiver:
        yield receiver


@pytest.fixture(scope="session")
def vllm_traces() -> Iterator[Receiver]:
    """The OTLP/HTTP receiver of the shared `vllm serve`'s own spans, for the whole session."""
    with running_receiver() as receiver:
        yield receiver


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory, vllm_traces: Receiver) -> Iterator[Server]:
    """One `vllm serve` of SmolLM2 for every module that needs no other server flags: a vLLM start
    costs a minute or more of a 2-core CI machine. Its tracing is on (spans to ``vllm_traces``) for
    test_vllm_tracing.py; the others read only their own requests' counts, and a span export does
    not change them."""
    flags = ["--otlp-traces-endpoint", f"{vllm_traces.url}/v1/traces"]
    env = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}
    server = start_vllm(tmp_path_factory.mktemp("vllm") / "server.log", flags=flags, env=env)
    yield server
    server.stop()
