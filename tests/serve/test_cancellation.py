"""A client that goes away cancels its whole run: every sample stops and the backend lets go.

Witnesses: the scripted backend's stream records (closed, tokens sent), the engine's free
KV blocks, and a second ``paragen serve``'s own running counts on /health (a real server
behind paragen's OpenAI backend).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from conftest import Serve, endless

from paragen.backends.engine import EngineBackend
from paragen.backends.openai import OpenAIBackend
from paragen.backends.scripted import ScriptedBackend

Q = [{"role": "user", "content": "Tell me a long story."}]


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def health(url: str) -> dict[str, Any]:
    data: dict[str, Any] = httpx.get(url.removesuffix("/v1") + "/health").json()
    return data


def read_until_started(lines: Iterator[str], samples: int) -> None:
    """Read the stream until every sample has started. The caller keeps ``lines``: an iterator
    dropped early closes the connection, which is the disconnect these tests make on purpose."""
    started = 0
    for line in lines:
        started += line.startswith(": paragen") and '"sample_started"' in line
        if started == samples:
            return
    raise AssertionError("the stream ended before every sample started")


def test_disconnect_mid_stream_stops_every_sample(serve: Serve) -> None:
    backend = ScriptedBackend(endless)
    body = {"model": "majority-4/scripted", "messages": Q, "stream": True}
    with serve(backend) as url:
        with httpx.stream("POST", f"{url}/chat/completions", json=body) as response:
            lines = response.iter_lines()  # kept until the block ends: the disconnect is its end
            read_until_started(lines, 4)
            wait_for(lambda: all(s.tokens_sent > 0 for s in backend.streams))
        # Leaving the block closed the connection mid-stream.
        wait_for(lambda: len(backend.streams) == 4 and all(s.closed is not None for s in backend.streams))
        sent = [s.tokens_sent for s in backend.streams]
        wait_for(lambda: health(url)["runs_running"] == 0 and health(url)["samples_running"] == 0)
        time.sleep(0.2)
        assert [s.tokens_sent for s in backend.streams] == sent  # nothing more was generated
        served = health(url)  # the cancelled run is counted, with what it generated
        assert served["runs_total"] == served["runs_cancelled_total"] == 1
        assert served["completion_tokens_total"] >= sum(sent) > 0
    assert max(sent) < 1000  # stopped long before the 5000 tokens each would have run to


def test_disconnect_while_waiting_for_a_whole_answer(serve: Serve) -> None:
    backend = ScriptedBackend(endless)
    with serve(backend) as url:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                f"{url}/chat/completions", json={"model": "ffs-3/scripted", "messages": Q}, timeout=0.5
            )
        wait_for(lambda: len(backend.streams) == 3 and all(s.closed is not None for s in backend.streams))
        wait_for(lambda: health(url)["runs_running"] == 0)
        wait_for(lambda: health(url)["runs_cancelled_total"] == 1)


@pytest.fixture
def engine(tiny_engine_dir: Path) -> Iterator[EngineBackend]:
    backend = EngineBackend.from_spec(str(tiny_engine_dir), dtype="float32", num_blocks=256, block_size=16)
    yield backend
    anyio.run(backend.aclose)


def test_disconnect_frees_the_engine(serve: Serve, engine: EngineBackend) -> None:
    total = engine.runtime.num_free_blocks
    body = {"model": "ffs-4/tiny", "messages": Q, "stream": True, "max_tokens": 3000}
    with serve(engine, names=("tiny",)) as url:
        with httpx.stream("POST", f"{url}/chat/completions", json=body) as response:
            lines = response.iter_lines()  # kept until the block ends: the disconnect is its end
            read_until_started(lines, 4)
            wait_for(
                lambda: engine.runtime.num_free_blocks < total - 6, timeout=60
            )  # prompt and decoded tokens
            assert health(url)["samples_running"] == 4
        wait_for(lambda: engine.runtime.num_free_blocks == total)
        wait_for(lambda: health(url)["samples_running"] == 0 and health(url)["runs_running"] == 0)
    assert engine.engine.is_idle


def test_disconnect_through_two_servers(serve: Serve, engine: EngineBackend) -> None:
    """client -> serve A (strategy; OpenAI backend) -> serve B (pass-through; engine): B lets go too."""
    total = engine.runtime.num_free_blocks
    with serve(engine, names=("tiny",)) as inner:
        outer_backend = OpenAIBackend.from_spec(inner, api_key_env=None, max_retries=0)
        with serve(outer_backend, names=("tiny",), close_backend=True) as outer:
            body = {"model": "majority-3/tiny", "messages": Q, "stream": True, "max_tokens": 3000}
            with httpx.stream("POST", f"{outer}/chat/completions", json=body) as response:
                lines = response.iter_lines()  # kept until the block ends: the disconnect is its end
                read_until_started(lines, 3)
                wait_for(lambda: health(inner)["samples_running"] == 3)  # three pass-through runs in B
            wait_for(lambda: health(inner)["runs_running"] == 0 and health(inner)["samples_running"] == 0)
            wait_for(lambda: engine.runtime.num_free_blocks == total)
            assert health(outer)["runs_running"] == 0
