"""The python tool's sandbox holds for root and for nobody, refuses to run without isolation
(unless the unsafe mode is chosen by name), and a refused action does not stop the plan.

The attacks (``llmc_attacks``) run through the tool as this process's user and, when the
tests run as root, as nobody too; each is checked by its actual effect outside the sandbox."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from llmc_attacks import (
    SECRET,
    Targets,
    attacks,
    effects,
    loopback_listener,
    nobody_layout,
    run_as_nobody,
)
from llmc_helpers import backend

from paragen.orchestrator import Orchestrator
from paragen.types import Problem
from strategies.llmcompiler import LLMCompiler
from strategies.llmcompiler.tools import python as sandbox
from strategies.llmcompiler.tools import sandbox as isolation
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


@pytest.fixture
def jailed() -> str:
    chosen = isolation.isolation()
    if chosen.refusal is not None:
        pytest.skip(f"no namespaces on this machine: {chosen.refusal}")
    return chosen.kind


@pytest.fixture
def layout() -> Iterator[Path]:
    """A folder anyone may enter, for a home, a working directory and a folder anyone may write."""
    with tempfile.TemporaryDirectory(prefix="paragen-attacks-") as tmp:
        os.chmod(tmp, 0o755)
        yield Path(tmp)


def check(results: dict[str, tuple[str, int | None, str | None]]) -> None:
    """Each attack stopped the way it should be; the secret never in any output."""
    for name, (output, _, _) in results.items():
        assert SECRET not in output, name
    assert "not allowed" in results["socket"][0] and "not allowed" in results["posix_spawn"][0]
    assert "Network is unreachable" in results["fork_exec"][0]  # the hook-free child: no network
    assert "not allowed" in results["write"][0]
    assert "ALLOCATED" not in results["memory_bomb"][0] + results["memory_bomb_child"][0]
    assert "MemoryError" in results["memory_bomb"][0] and "MemoryError" in results["memory_bomb_child"][0]
    assert results["infinite_loop"][2] is not None
    assert "Cannot fork" in results["fork_bomb"][0] or results["fork_bomb"][2] is not None


@pytest.mark.anyio
async def test_attacks_as_this_user_have_no_effect(
    jailed: str, layout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARAGEN_FAKE_API_KEY", SECRET)
    home = Path.home() / f".paragen-sandbox-test-{os.getpid()}"
    cwd = Path.cwd() / f".paragen-sandbox-test-{os.getpid()}"
    outside = layout / "outside"
    outside.mkdir()
    outside.chmod(0o777)  # even a folder anyone may write to stays out of reach
    for path in (home, cwd):
        path.write_text(SECRET)
    try:
        with loopback_listener() as listener:
            targets = Targets(os.getpid(), listener.getsockname()[1], home, cwd, outside)
            results = {}
            for name, code in attacks(targets).items():
                r = await run_code(code, timeout_s=4.0, cpu_s=2, max_processes=16)
                assert r.isolation == jailed
                results[name] = (r.output, r.returncode, r.killed)
            check(results)
            assert effects(targets, listener) == []
    finally:
        home.unlink()
        cwd.unlink()


def test_attacks_as_nobody_have_no_effect(jailed: str, layout: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to become nobody; the test above ran the attacks as this user")
    with loopback_listener() as listener:
        targets = nobody_layout(layout, listener.getsockname()[1])
        env = {"PARAGEN_FAKE_API_KEY": SECRET}
        report = run_as_nobody(attacks(targets), layout / "cwd", layout / "home", env)
        raw = report["results"]
        assert report["uid"] == 65534 and isinstance(raw, dict)
        assert effects(targets, listener) == []
    if report["probe"] == "refused":  # user namespaces off here: the tool ran nothing, said so
        assert {kind for *_, kind in raw.values()} == {"refused"}
        pytest.skip(f"no user namespaces for nobody here: {next(iter(raw.values()))[0]}")
    check({name: (out, rc, killed) for name, (out, rc, killed, _) in raw.items()})
    assert all(",user)" in str(kind) for *_, kind in raw.values())  # a user namespace, as nobody


FAILING_UNSHARE = "#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\nexit 1\n"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("fake_unshare", "why"),
    [(False, "unshare (util-linux) is not on PATH"), (True, "unshare failed: Operation not permitted")],
)
async def test_without_namespaces_the_tool_refuses_in_one_line(
    fake_unshare: bool, why: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No util-linux on PATH, or a kernel refusing the namespaces (an unshare that fails)."""
    if fake_unshare:
        (tmp_path / "unshare").write_text(FAILING_UNSHARE)
        (tmp_path / "unshare").chmod(0o755)
        (tmp_path / "setpriv").symlink_to("/usr/bin/setpriv")
    isolation._probe.cache_clear()
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(isolation.UNSAFE_ENV, raising=False)
    try:
        chosen = isolation.isolation()
        result = await sandbox.python((), {"code": "print(1)"})
    finally:
        isolation._probe.cache_clear()
    assert chosen.kind == "refused" and result == chosen.refusal and "\n" not in result
    assert why in result and isolation.UNSAFE_ENV in result and "unsafe_no_isolation" in result


@pytest.mark.anyio
async def test_the_unsafe_mode_runs_only_when_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(isolation, "_probe", lambda: "user namespaces are off")
    monkeypatch.delenv(isolation.UNSAFE_ENV, raising=False)
    assert (await run_code("print(1)")).isolation == "refused"
    opted = await run_code("import socket\nsocket.socket()", unsafe_no_isolation=True)
    monkeypatch.setenv(isolation.UNSAFE_ENV, "1")
    write = await run_code("open('/tmp/paragen-escape-test', 'w')")
    assert opted.isolation == write.isolation == "unsafe:rlimits+audit"
    assert "not allowed" in opted.output and "not allowed" in write.output
    assert not await anyio.Path("/tmp/paragen-escape-test").exists()


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
