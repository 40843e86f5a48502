"""Run model-written Python in a subprocess sandbox.

Layers, strongest first, each used where this machine allows it:

1. Namespaces (root only, via ``unshare``): a fresh network namespace with no interfaces,
   and a PID namespace, so killing its first process kills every process the code made.
2. An unprivileged user (``setpriv`` to nobody when running as root), so file permissions
   and the process-count limit apply.
3. Limits set before any user code runs: CPU seconds, address space, process count, file size.
4. An audit hook in the child refusing sockets, process creation, ctypes, and writes outside
   the sandbox's own temporary directory.
5. A wall-clock timeout and an output cap enforced by the parent.

The tool never raises for what the code does: a crash, a refusal or a timeout comes back as
the observation text, so the plan goes on.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
from anyio.abc import Process
from pydantic import BaseModel, Field

from strategies.llmcompiler.tools import tool

_RUNNER = r"""
import os, resource, sys
tmp, path, cpu, mem, nproc, fsize = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
for kind, value in ((resource.RLIMIT_CPU, cpu), (resource.RLIMIT_AS, mem),
                    (resource.RLIMIT_NPROC, nproc), (resource.RLIMIT_FSIZE, fsize),
                    (resource.RLIMIT_CORE, 0)):
    resource.setrlimit(kind, (value, value))
code = open(path).read()
WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
BLOCKED = ("socket.", "subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.fork", "os.spawn",
           "pty.", "ctypes.dlopen", "ctypes.dlsym", "ctypes.call_function", "os.kill", "os.killpg")
PATH_EVENTS = {"os.remove": 1, "os.rmdir": 1, "os.mkdir": 1, "os.chmod": 1, "os.chown": 1, "os.utime": 1,
               "os.truncate": 1, "os.rename": 2, "os.link": 2, "os.symlink": 2, "shutil.rmtree": 1}
def inside(p):
    if isinstance(p, int):
        return True
    real = os.path.realpath(os.fsdecode(p))
    return real == tmp or real.startswith(tmp + os.sep)
def hook(event, args):
    if event.startswith(BLOCKED):
        raise PermissionError(f"sandbox: {event} is not allowed")
    if event == "open":
        p, mode, flags = args
        writes = (mode is not None and any(c in mode for c in "wax+")) or bool((flags or 0) & WRITE)
        if writes and not inside(p):
            raise PermissionError(f"sandbox: writing outside the sandbox directory is not allowed: {p}")
    elif event in PATH_EVENTS:
        for p in args[: PATH_EVENTS[event]]:
            if not inside(p):
                raise PermissionError(f"sandbox: {event} outside the sandbox directory is not allowed")
sys.addaudithook(hook)
os.chdir(tmp)
exec(compile(code, "<sandbox>", "exec"), {"__name__": "__main__"})
"""


class PythonArgs(BaseModel):
    code: str = Field(description="a Python program; print() what you want to see")


@tool(
    "python",
    'python(code: str) -> str: runs a Python program, returns what it printed, e.g. python("print(2**10)"). '
    "No network, no files outside its own folder, a few seconds of CPU.",
)
async def python(
    args: PythonArgs,
    *,
    timeout_s: float = 5.0,
    cpu_s: int = 5,
    memory_mb: int = 512,
    max_processes: int = 32,
    max_output: int = 8_000,
) -> str:
    result = await run_sandboxed(
        args.code,
        timeout_s=timeout_s,
        cpu_s=cpu_s,
        memory_mb=memory_mb,
        max_processes=max_processes,
        max_output=max_output,
    )
    return result.observation()


class SandboxResult:
    """What a sandboxed run produced: output (capped), exit status, and why it was stopped."""

    def __init__(self, output: str, returncode: int | None, killed: str | None, isolation: str) -> None:
        self.output = output
        self.returncode = returncode
        self.killed = killed
        self.isolation = isolation

    def observation(self) -> str:
        text = self.output.rstrip()
        if self.killed:
            text += f"\n[stopped: {self.killed}]"
        elif self.returncode:
            text += f"\n[exit status {self.returncode}]"
        return text.strip() or "(no output)"


async def run_sandboxed(
    code: str,
    *,
    timeout_s: float = 5.0,
    cpu_s: int = 5,
    memory_mb: int = 512,
    max_processes: int = 32,
    max_output: int = 8_000,
) -> SandboxResult:
    """Run ``code`` under every isolation layer available here (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="paragen-py-") as tmp:
        root = Path(tmp)
        (root / "main.py").write_text(code, encoding="utf-8")
        limits = [str(cpu_s), str(memory_mb << 20), str(max_processes), str(16 << 20)]
        command, isolation = _command(root, limits)
        started = anyio.current_time()
        async with await anyio.open_process(
            command, stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True, env=_env()
        ) as process:
            output, killed = await _collect(process, timeout_s, max_output)
            returncode = process.returncode
        if killed is None and returncode and anyio.current_time() - started >= 0.9 * cpu_s:
            killed = f"CPU limit {cpu_s}s"  # SIGXCPU; unshare reports it only as a failure
        return SandboxResult(output, returncode, killed, isolation)


def _command(root: Path, limits: list[str]) -> tuple[list[str], str]:
    runner = [sys.executable, "-I", "-c", _RUNNER, str(root.resolve()), str(root / "main.py"), *limits]
    if not _namespaces_work():
        return runner, "rlimits+audit"
    os.chown(root, 65534, 65534)  # the code runs as nobody and may write only here
    os.chown(root / "main.py", 65534, 65534)
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"]
    return [
        "unshare",
        "--net",
        "--pid",
        "--fork",
        "--kill-child",
        *drop,
        *runner,
    ], "netns+pidns+nobody+rlimits+audit"


@functools.cache
def _namespaces_work() -> bool:
    """Whether ``unshare`` can make network and PID namespaces here (root in most containers)."""
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("setpriv")):
        return False
    probe = ["unshare", "--net", "--pid", "--fork", "--kill-child", "true"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=5, check=False).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _env() -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "HOME": "/nonexistent",
    }


async def _collect(process: Process, timeout_s: float, max_output: int) -> tuple[str, str | None]:
    chunks: list[bytes] = []
    size, killed = 0, None
    assert process.stdout is not None
    with anyio.move_on_after(timeout_s) as scope:
        async for chunk in process.stdout:
            chunks.append(chunk)
            size += len(chunk)
            if size > max_output:
                killed = f"output over {max_output} bytes"
                break
        if killed is None:
            await process.wait()
    if scope.cancelled_caught:
        killed = f"time limit {timeout_s:g}s"
    if killed is not None:
        await _kill(process)
    text = b"".join(chunks)[:max_output].decode("utf-8", errors="replace")
    return text, killed


async def _kill(process: Process) -> None:
    # the session's whole process group: the code's children die with it even without a PID namespace
    with anyio.CancelScope(shield=True):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()


__all__ = ["PythonArgs", "SandboxResult", "python", "run_sandboxed"]
