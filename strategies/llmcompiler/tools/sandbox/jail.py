"""Inside fresh namespaces, build a new root from read-only binds, then run the runner in it.

Run by the parent as ``python -I -S -c <this file's text> <config json>`` as the first process
of new mount, PID and network namespaces (and a user namespace when the parent is not root),
so it is PID 1 there and may mount. Standard library only: it runs before any isolation, from
the interpreter's own installation, never from the repository or a venv.

The new root is a read-only tmpfs holding read-only binds of the system directories, of the
interpreter's prefix and of the venv's package folders; the sandbox folder (a tmpfs, the only
writable place besides a private /tmp, another one), a few device nodes and a fresh /proc of
the new PID namespace. The old root is detached. PID 1 stays here as a supervisor (the
parent's death kills it, and with it every process in the namespace); its child drops every
capability (and, for root, becomes nobody) with ``setpriv`` and runs the runner.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
import signal
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_MOVE, MS_REC = 1024, 2048, 4096, 8192, 16384
MS_PRIVATE, MS_RELATIME, MNT_DETACH = 1 << 18, 1 << 21, 2
# statvfs flag -> mount flag: the flags a user namespace may not clear on a remount
LOCKED = {1: MS_RDONLY, 2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC, 1024: MS_NOATIME, 2048: MS_NODIRATIME}
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
KEYCTL = {"x86_64": 250, "aarch64": 219, "riscv64": 219, "ppc64le": 311, "s390x": 280}
DEVICES = ("null", "zero", "random", "urandom")
LIBC = ctypes.CDLL(None, use_errno=True)


def _b(value: str | None) -> bytes | None:
    return None if value is None else os.fsencode(value)


def mount(src: str | None, dst: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    if LIBC.mount(_b(src), _b(dst), _b(fstype), ctypes.c_ulong(flags), _b(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {src} on {dst}: {os.strerror(err)}")


def locked_flags(path: str) -> int:
    flags = os.statvfs(path).f_flag
    kept = sum(ms for st, ms in LOCKED.items() if flags & st)
    return kept | (MS_RELATIME if flags & 4096 else 0)


def submounts(target: str) -> list[str]:
    with open("/proc/self/mountinfo", encoding="utf-8") as info:
        points = [line.split()[4].replace("\\040", " ") for line in info]
    return [p for p in points if p == target or p.startswith(target.rstrip("/") + "/")]


def bind_ro(src: str, target: str) -> None:
    """A recursive bind of ``src`` at ``target``, every mount in it read-only."""
    if os.path.isdir(src):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    mount(src, target, None, MS_BIND | MS_REC)
    for point in submounts(target):
        mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | locked_flags(point))


def place(root: str, path: str) -> None:
    target = root + path
    if os.path.islink(path):  # /bin -> usr/bin and the like: the same link in the new root
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.symlink(os.readlink(path), target)
    elif os.path.exists(path):
        bind_ro(path, target)


def optional(root: str) -> None:
    """Device nodes and a fresh /proc: the code runs without them where the kernel refuses."""
    for name in DEVICES:
        dev = f"{root}/dev/{name}"
        open(dev, "a").close()
        try:
            mount(f"/dev/{name}", dev, None, MS_BIND)
        except OSError:
            os.unlink(dev)
    with contextlib.suppress(OSError):
        mount("proc", f"{root}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)


def sandbox_folder(root: str, work: str, owner: int) -> None:
    """/sandbox: a tmpfs of 64 MB (no byte reaches the host's disk) holding the code's file."""
    options = f"size=64m,mode=700,uid={owner},gid={owner}"
    mount("tmpfs", f"{root}/sandbox", "tmpfs", MS_NOSUID | MS_NODEV, options)
    with open(f"{work}/main.py", "rb") as source, open(f"{root}/sandbox/main.py", "wb") as copy:
        copy.write(source.read())
    os.chown(f"{root}/sandbox/main.py", owner, owner)


def build(root: str, work: str, ro: list[str], owner: int) -> None:
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=8m,mode=755")
    for path in ro:
        place(root, path)
    for name in ("sandbox", "tmp", "dev", "proc", "etc"):
        os.makedirs(f"{root}/{name}", exist_ok=True)
    sandbox_folder(root, work, owner)
    mount("tmpfs", f"{root}/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=1777")
    with open(f"{root}/etc/passwd", "w", encoding="utf-8") as passwd:
        passwd.write("root:x:0:0::/sandbox:/bin/sh\nnobody:x:65534:65534::/sandbox:/bin/sh\n")
    with open(f"{root}/etc/group", "w", encoding="utf-8") as group:
        group.write("root:x:0:\nnogroup:x:65534:\n")
    optional(root)
    mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def enter(root: str) -> None:
    """Make ``root`` the root and detach the old one."""
    os.chdir(root)
    number = PIVOT_ROOT.get(platform.machine())
    if number is not None and LIBC.syscall(number, b".", b".") == 0:
        if LIBC.umount2(b".", MNT_DETACH) != 0:
            raise OSError(ctypes.get_errno(), "umount of the old root")
    else:
        mount(".", "/", None, MS_MOVE)
        os.chroot(".")
    os.chdir("/")


def supervise(argv: list[str], deadline_s: int) -> int:
    """Run ``argv`` as PID 1's only child; PID 1 ending (its return, or ``deadline_s`` passing
    when the parent is gone and cannot kill it) ends every process in the namespace."""
    LIBC.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: the code cannot ptrace or read PID 1
    number = KEYCTL.get(platform.machine())
    if number is not None:  # KEYCTL_JOIN_SESSION_KEYRING: none of the parent's keys
        LIBC.syscall(number, 1, None)
    signal.signal(signal.SIGALRM, lambda *_: os._exit(124))
    signal.alarm(deadline_s)
    pid = os.fork()
    if pid == 0:
        os.chdir("/sandbox")
        try:
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    status = os.waitpid(pid, 0)[1]
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def main() -> int:
    config = json.loads(sys.argv[1])
    try:
        build(config["root"], config["work"], config["ro"], config["owner"])
        enter(config["root"])
    except OSError as exc:
        print(f"sandbox: cannot build the isolated root: {exc}", file=sys.stderr)
        return 125
    return supervise(config["argv"], config["deadline_s"])


if __name__ == "__main__":
    sys.exit(main())
