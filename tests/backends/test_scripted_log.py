"""The scripted backend as a long-lived server's backend: its log of streams stays bounded (the
latest ones, and a count of all), and a script file is checked line by line where it is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from paragen.backends.scripted import Script, ScriptedBackend, StreamRecord
from paragen.errors import ConfigError
from paragen.types import GenerateRequest, SamplingParams

pytestmark = pytest.mark.anyio


async def serve(backend: ScriptedBackend, count: int) -> None:
    for i in range(count):
        request = GenerateRequest(prompt=f"q{i}", request_id=f"r{i}", params=SamplingParams(max_tokens=4))
        async with backend.stream(request) as stream:
            async for _ in stream:
                pass


async def test_the_log_keeps_the_latest_streams_and_counts_them_all() -> None:
    backend = ScriptedBackend([Script(text="four")], keep_streams=8)
    await serve(backend, 50)
    assert backend.num_streams == 50 and backend.calls == 50
    assert [s.request.request_id for s in backend.streams] == [f"r{i}" for i in range(42, 50)]
    assert all(
        isinstance(s, StreamRecord) and s.closed is not None and s.tokens_sent == 1 for s in backend.streams
    )


async def test_by_default_a_long_run_keeps_a_bounded_log() -> None:
    backend = ScriptedBackend()  # what `paragen serve -b scripted` runs on
    await serve(backend, 1100)
    assert backend.num_streams == 1100 and len(backend.streams) == 1024
    assert backend.streams[-1].request.request_id == "r1099"


def test_a_negative_log_size_is_refused() -> None:
    with pytest.raises(ConfigError, match="keep_streams"):
        ScriptedBackend(keep_streams=-1)


def test_a_script_file_line_that_is_no_script_is_named(tmp_path: Path) -> None:
    path = tmp_path / "scripts.jsonl"
    path.write_text('{"text": "The answer is 4."}\n\n{"txt": "hello", "token_delay": -1}\n')
    with pytest.raises(ConfigError) as info:
        ScriptedBackend.from_spec(str(path))
    message = str(info.value)
    assert (
        "scripts.jsonl line 3" in message
        and "token_delay: Input should be greater than or equal to 0" in message
    )
    assert "text: Field required" in message and "txt: Extra inputs are not permitted" in message


def test_a_script_file_that_is_not_json_is_named(tmp_path: Path) -> None:
    path = tmp_path / "scripts.jsonl"
    path.write_text("{not json\n")
    with pytest.raises(ConfigError, match=r"scripts\.jsonl line 1: Invalid JSON"):
        ScriptedBackend.from_spec(str(path))


async def test_a_good_script_file_is_served_in_order(tmp_path: Path) -> None:
    path = tmp_path / "scripts.jsonl"
    path.write_text('{"text": "one"}\n{"text": "two", "token_delay": 0.001}\n')
    backend = ScriptedBackend.from_spec(str(path))
    await serve(backend, 2)
    assert [s.tokens_sent for s in backend.streams] == [1, 1] and backend.num_streams == 2
