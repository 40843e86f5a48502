"""The python tool's sandbox refuses escapes, and a refused action does not stop the plan."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest
from llmc_helpers import backend

from paragen.orchestrator import Orchestrator
from paragen.types import Problem
from strategies.llmcompiler import LLMCompiler
from strategies.llmcompiler.tools import python as sandbox
from strategies.llmcompiler.tools.calculator import calculator

LIMITS = {"timeout_s": 3.0, "cpu_s": 1, "memory_mb": 256}


async def run_code(code: str, **limits: float) -> sandbox.SandboxResult:
    with anyio.fail_after(10):
        return await sandbox.run_sandboxed(code, **{**LIMITS, **limits})  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_ordinary_code_runs_and_may_use_its_own_folder() -> None:
    result = await run_code("open('n.txt', 'w').write('7')\nprint(int(open('n.txt').read()) * 6)")
    assert result.observation() == "42" and result.returncode == 0


@pytest.mark.anyio
async def test_network_is_refused() -> None:
    result = await run_code(
        "import socket\ns = socket.create_connection(('127.0.0.1', 22), timeout=1)\nprint('IN')"
    )
    assert "IN" not in result.output and result.returncode != 0


@pytest.mark.anyio
async def test_writes_outside_the_sandbox_folder_are_refused(tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    os.chmod(tmp_path, 0o777)  # even a folder anyone may write to stays out of reach
    result = await run_code(f"open({str(target)!r}, 'w').write('x')")
    assert not target.exists() and "PermissionError" in result.output
    result = await run_code(f"import os\nos.rename('.', {str(tmp_path / 'moved')!r})")
    assert result.returncode != 0 and not (tmp_path / "moved").exists()


@pytest.mark.anyio
async def test_fork_bomb_and_subprocesses_are_refused() -> None:
    result = await run_code("import os\nwhile True:\n    os.fork()")
    assert result.returncode != 0 and "not allowed" in result.output
    result = await run_code("import subprocess\nsubprocess.run(['sh', '-c', ':(){ :|:& };:'])")
    assert result.returncode != 0 and "not allowed" in result.output


@pytest.mark.anyio
async def test_memory_hog_is_stopped() -> None:
    result = await run_code("x = bytearray(2 * 1024**3)\nprint('ALLOCATED')")
    assert "ALLOCATED" not in result.output and "MemoryError" in result.output


@pytest.mark.anyio
async def test_infinite_loop_and_sleep_are_stopped_in_time() -> None:
    start = anyio.current_time()
    spin = await run_code("while True:\n    pass")
    sleep = await run_code("import time\ntime.sleep(60)", timeout_s=1.0)
    assert spin.killed is not None and sleep.killed == "time limit 1s"
    assert anyio.current_time() - start < 6


@pytest.mark.anyio
async def test_output_is_capped() -> None:
    result = await run_code("while True:\n    print('x' * 1000)", max_output=5000)
    assert len(result.output) <= 5000 and result.killed == "output over 5000 bytes"


@pytest.mark.anyio
async def test_without_namespaces_the_audit_layer_still_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "_namespaces_work", lambda: False)
    net = await run_code("import socket\nsocket.socket()")
    write = await run_code("open('/tmp/paragen-escape-test', 'w')")
    assert "not allowed" in net.output and "not allowed" in write.output
    assert not await anyio.Path("/tmp/paragen-escape-test").exists()
    assert (await run_code("print(1)")).isolation == "rlimits+audit"


@pytest.mark.anyio
async def test_a_refused_escape_is_an_observation_and_the_run_continues() -> None:
    plan = (
        '1. python("import socket; socket.socket()")\n'
        '2. python("while True: pass")\n'
        '3. calculator("6 * 7")\n'
        "4. join()"
    )
    seen: list[object] = []
    joiner = "Thought: the sandboxed actions failed, the calculator did not.\nAction: Finish(42)"
    tools = {"python": sandbox.python.bind(timeout_s=2.0, cpu_s=1), "calculator": calculator}
    with anyio.fail_after(15):
        result = await Orchestrator(backend([plan], [joiner], seen=seen)).run(
            LLMCompiler(toolbox=tools), Problem(question="six times seven?")
        )
    assert result.answer == "42"
    spans = {t.meta["idx"]: t for t in result.traces if t.kind == "tool"}
    assert "not allowed" in spans[1].text and "stopped" in spans[2].text and spans[3].text == "42"
