"""Run model-written Python in a sandbox that holds for every user, root or not.

Isolation rests on Linux namespaces, made with ``unshare`` (util-linux) wherever the kernel
allows them, for root and for unprivileged users alike (unprivileged user namespaces):

- network: a namespace of its own with no usable interface (loopback down), so no connection
  reaches anything, the host's loopback included;
- PID: the code sees only its own processes, and a supervisor as PID 1 whose death (the
  parent's kill at the time limit, or the parent's own death) kills every process it made;
- mount: a new root of read-only binds of the system directories (``/usr``, ``/lib*``,
  ``/bin``, two files of ``/etc``), of the interpreter's installation (``sys.base_prefix``)
  and of the venv's package folders (not the repository); the run's own folder as
  ``/sandbox`` (a 64 MB tmpfs), the only writable place besides a private ``/tmp`` of 16 MB;
  ``/dev/{null,zero,random,urandom}`` and a fresh ``/proc`` of the new PID namespace. The old
  root is detached, so the user's home, the working directory, the repository and the
  parent's ``/proc`` (its environment, API keys included) are not there;
- user: as root the code runs as nobody with no capabilities; as any other user in a user
  namespace as its root with every capability dropped (securebits locked, no_new_privs), so
  it can neither remount nor leave the new root.

Inside, before the code: CPU seconds, address space, process count and file size limits, an
environment of only ``PATH``, ``LANG`` and ``HOME``, and an audit hook refusing sockets,
process creation, ctypes and writes outside the folder (defence in depth only:
``_posixsubprocess.fork_exec`` or a C extension pass it). The parent enforces a wall-clock
timeout and an output cap.

Not guaranteed: protection from kernel bugs (the code shares the host kernel and may make any
system call; there is no seccomp filter), from CPU, memory-bandwidth or disk contention, or
secrecy of what the read-only system directories, the interpreter and the venv's packages
hold. Where namespaces are not available (no util-linux, user namespaces disabled, a
container refusing them) the tool refuses to run and its observation says why, in one line
naming the opt-in to the weak mode: ``PARAGEN_PYTHON_TOOL_UNSAFE=1`` or the tool option
``unsafe_no_isolation=true`` (limits and audit hook only).
:func:`~strategies.llmcompiler.tools.sandbox.isolation` answers the same before any run, and
every result records the isolation it ran under (:attr:`SandboxResult.isolation`).

The tool never raises for what the code does: a crash, a refusal or a timeout comes back as
the observation text, so the plan goes on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
from pathlib import Path

import anyio
import anyio.to_thread
from anyio.abc import Process
from pydantic import BaseModel, Field

from strategies.llmcompiler.tools import tool
from strategies.llmcompiler.tools.sandbox import clean_env, command, isolation


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
    unsafe_no_isolation: bool = False,
) -> str:
    result = await run_sandboxed(
        args.code,
        timeout_s=timeout_s,
        cpu_s=cpu_s,
        memory_mb=memory_mb,
        max_processes=max_processes,
        max_output=max_output,
        unsafe_no_isolation=unsafe_no_isolation,
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
    unsafe_no_isolation: bool = False,
) -> SandboxResult:
    """Run ``code`` isolated (see the module docstring), or answer why not."""
    chosen = await anyio.to_thread.run_sync(isolation, unsafe_no_isolation)
    if chosen.refusal is not None:
        return SandboxResult(chosen.refusal, None, None, chosen.kind)
    with tempfile.TemporaryDirectory(prefix="paragen-py-") as tmp:
        folder = Path(tmp)
        (folder / "work").mkdir()
        (folder / "work" / "main.py").write_text(code, encoding="utf-8")
        limits = [str(cpu_s), str(memory_mb << 20), str(max_processes), str(16 << 20)]
        started = anyio.current_time()
        async with await anyio.open_process(
            command(folder, limits, chosen.kind, timeout_s),
            stdin=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=clean_env(),
        ) as process:
            output, killed = await _collect(process, timeout_s, max_output)
            returncode = process.returncode
        if killed is None and returncode and anyio.current_time() - started >= 0.9 * cpu_s:
            killed = f"CPU limit {cpu_s}s"  # SIGXCPU or SIGKILL, reported through the supervisor
        return SandboxResult(output, returncode, killed, chosen.kind)


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
