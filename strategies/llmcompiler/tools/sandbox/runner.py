"""The last step before the model's code: resource limits, then an audit hook, then ``exec``.

Run as ``python -I -c <this file's text> <folder> <code file> <cpu s> <bytes> <processes>
<file bytes> [<package folder>...]``. Standard library only. The audit hook (refusing sockets,
process creation, ctypes and writes outside ``<folder>``) is defence in depth:
``_posixsubprocess.fork_exec`` and any C extension pass it, so the guarantees rest on the
namespaces around this process.
"""

from __future__ import annotations

import os
import resource
import sys
from typing import Any

WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
BLOCKED = (
    "socket.", "subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.fork", "os.spawn",
    "pty.", "ctypes.dlopen", "ctypes.dlsym", "ctypes.call_function", "os.kill", "os.killpg",
)  # fmt: skip
PATH_EVENTS = {
    "os.remove": 1, "os.rmdir": 1, "os.mkdir": 1, "os.chmod": 1, "os.chown": 1, "os.utime": 1,
    "os.truncate": 1, "os.rename": 2, "os.link": 2, "os.symlink": 2, "shutil.rmtree": 1,
}  # fmt: skip


def limit(cpu: int, memory: int, processes: int, file_size: int) -> None:
    for kind, value in (
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_AS, memory),
        (resource.RLIMIT_NPROC, processes),
        (resource.RLIMIT_FSIZE, file_size),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(kind, (value, value))


def hook_for(folder: str) -> Any:
    def inside(path: object) -> bool:
        if isinstance(path, int):
            return True
        real = os.path.realpath(os.fsdecode(path))  # type: ignore[arg-type]
        return real == folder or real.startswith(folder + os.sep)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event.startswith(BLOCKED):
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open":
            path, mode, flags = args
            writes = (mode is not None and any(c in mode for c in "wax+")) or bool((flags or 0) & WRITE)
            if writes and not inside(path):
                raise PermissionError(f"sandbox: writing outside the sandbox folder is not allowed: {path}")
        elif event in PATH_EVENTS and not all(inside(p) for p in args[: PATH_EVENTS[event]]):
            raise PermissionError(f"sandbox: {event} outside the sandbox folder is not allowed")

    return hook


def main() -> None:
    folder, path = sys.argv[1], sys.argv[2]
    cpu, memory, processes, file_size = map(int, sys.argv[3:7])
    limit(cpu, memory, processes, file_size)
    with open(path, encoding="utf-8") as source:
        code = source.read()
    sys.addaudithook(hook_for(folder))
    os.chdir(folder)
    sys.path.extend(sys.argv[7:])
    sys.argv = [path]
    exec(compile(code, "<sandbox>", "exec"), {"__name__": "__main__"})


if __name__ == "__main__":
    main()
