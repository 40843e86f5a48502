"""The fork/join executor on llama.cpp's C++ `llama-server`, which continues a prefilled reply, with a
tiny model trained to write ThreadWeaver's grammar (tests/fork_weaver.py), written as a GGUF: the
trunk stops at ``</Outlines>``, both children decode at once in the server's two slots, their texts
are joined as the grammar says and the trunk goes on to the answer, the same text the engine
assembles."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fork_weaver import CHILDREN, PROBLEM, WOVEN, write_gguf
from real_servers import Server, smollm2_gguf, start_llama_server

from paragen import Orchestrator
from paragen.backends.openai import OpenAIBackend
from paragen.strategy import build_strategy
from paragen.types import SamplingParams

pytestmark = [pytest.mark.server, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def weaver_server(weaver_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("weaver-gguf")
    gguf = write_gguf(weaver_dir, smollm2_gguf(), folder / "weaver.gguf")
    server = start_llama_server(folder / "server.log", model=gguf, slots=2, flags=["--jinja"])
    yield server
    server.stop()


async def test_forkjoin_forks_on_llama_server(weaver_server: Server) -> None:
    backend = OpenAIBackend.from_spec(weaver_server.url, api_key_env=None)
    defaults = SamplingParams(max_tokens=200, temperature=0.0, seed=0)
    try:
        result = await Orchestrator(backend, defaults=defaults).run(build_strategy("forkjoin", {}), PROBLEM)
    finally:
        await backend.aclose()
    assert backend.capabilities.continue_final  # llama-server continues a prefilled reply
    assert result.stop_reason == "done", result.error
    assert (result.answer, result.text) == ("53", WOVEN)
    assert (result.metrics["forks"], result.metrics["children"]) == (1, 2)
    assert [t.label for t in result.traces] == ["trunk", "child", "child", "trunk"]
    _, first, second, _ = result.traces
    assert [first.text, second.text] == list(CHILDREN.values())
    # Both children decoded at once: each produced its first token before the other ended.
    assert first.end is not None and second.end is not None
    assert first.first_token is not None and second.first_token is not None
    assert first.first_token < second.end and second.first_token < first.end
