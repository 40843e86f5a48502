"""Shared fixtures of the backend tests."""

from __future__ import annotations

import pytest
from openai_fakes import FakeServer


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def server() -> FakeServer:
    return FakeServer()
