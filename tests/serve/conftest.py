"""Fixtures of the ``paragen serve`` tests: real uvicorn servers on loopback, in a thread.

The server runs in its own thread and event loop, as a deployed one would; the tests
talk to it over HTTP with the official openai client, httpx, or paragen's own OpenAI
backend, and read the backend they handed it (scripted streams, engine free blocks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from paragen.backends.base import Backend
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.serve import ServeConfig, create_app, serve_in_thread
from paragen.types import GenerateRequest

Serve = Callable[..., AbstractContextManager[str]]


@contextmanager
def serving(
    backend: Backend, names: tuple[str, ...] = ("scripted",), *, close_backend: bool = False, **settings: Any
) -> Iterator[str]:
    """``backend`` served on a free loopback port; yields the base URL (ending in /v1).

    The backend stays open afterwards unless ``close_backend`` (the test reads it, then closes it).
    """
    config = ServeConfig(model_names=names, **settings)
    with serve_in_thread(create_app(backend, config, close_backend=close_backend)) as url:
        yield url


@pytest.fixture
def serve() -> Serve:
    return serving


def counting_responder(request: GenerateRequest, index: int) -> Script:
    """Sample i answers "... The answer is \\boxed{12}." with a few words, 2 ms a token."""
    seed = (request.params.seed or 0) + index
    words = " ".join(["step"] * (2 + seed % 3))
    return Script(text=f"{words} so 7 + 5 = 12. The answer is \\boxed{{12}}.", token_delay=0.002)


@pytest.fixture
def scripted() -> ScriptedBackend:
    return ScriptedBackend(counting_responder)


def endless(request: GenerateRequest, index: int) -> Script:
    """A sample that would run for 50 s: only cancelling it ends it early."""
    return Script(text=" ".join(["tok"] * 5000), token_delay=0.01)


# -- a tiny random-init Llama for the engine (the shape of tests/engine's, one layer fewer) ----------


@pytest.fixture(scope="session")
def tiny_engine_dir(tiny_model: Callable[..., Path]) -> Path:
    return tiny_model(
        "tiny-llama",
        "LlamaForCausalLM",
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
    )
