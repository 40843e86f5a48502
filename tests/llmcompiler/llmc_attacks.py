"""Escape attempts for the python tool's sandbox, and a way to run the tool as nobody.

Each attack is a program for the tool. The caller checks the attack's actual effect (a file
written, a connection accepted, a secret printed, a process left over), never only the text.
Attacks that must get past the audit hook start their payload with
``_posixsubprocess.fork_exec``, which raises no audit event, so what stops them is the
namespaces alone.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from strategies.llmcompiler.tools.sandbox import site_dirs

REPO = Path(__file__).resolve().parents[2]
SECRET = "sk-paragen-fake-secret-5f1d2c"
MARKER = "paragen-bomb-7c1e"
PARENT = 999_999_999  # in attacks run by the nobody driver: replaced by the driver's pid
NOBODY = 65534

SPAWN = r"""
import _posixsubprocess, os, sys
def spawn(argv):
    r, w = os.pipe()
    args = [[os.fsencode(a) for a in argv], (os.fsencode(argv[0]),), True, (), None, None,
            -1, -1, -1, -1, -1, -1, r, w, True, False, -1, None, None, None, -1, None]
    try:
        pid = _posixsubprocess.fork_exec(*args, False)
    except TypeError:
        pid = _posixsubprocess.fork_exec(*args)
    os.close(w)
    print('spawned', pid, os.read(r, 100), flush=True)
    return pid
"""


@dataclass(frozen=True)
class Targets:
    """Where the attacks aim: the parent's pid, files of the user's, a folder anyone may write."""

    parent: int
    port: int
    home_file: Path
    cwd_file: Path
    outside: Path


def attacks(t: Targets) -> dict[str, str]:
    shell = (
        f"echo PWNED > {t.outside}/by-shell; echo PWNED > /tmp/{MARKER}-tmp; "
        f"touch /usr/{MARKER} /sandbox/../{MARKER}; "
        f"cat /proc/{t.parent}/environ {t.home_file} {t.cwd_file}; cat /proc/*/environ"
    )
    writable = " ".join(f"{p}/{MARKER}" for p in (*site_dirs(), "/usr"))
    nested = (  # a user namespace of its own gives capabilities, but over a copy of locked mounts
        f"unshare --user --map-root-user --mount sh -c 'mount -o remount,bind,rw /usr; "
        f"for p in {writable}; do mount -o remount,bind,rw $(dirname $p); umount -l $(dirname $p); "
        f"touch $p; done; umount -l /sandbox; ls /sandbox'"
    )
    connect = f"import socket; socket.create_connection(('127.0.0.1', {t.port}), timeout=1); print('IN')"
    return {
        "socket": f"import socket\ns = socket.socket()\ns.settimeout(1)\ns.connect(('127.0.0.1', {t.port}))",
        "fork_exec": SPAWN + f"os.waitpid(spawn([sys.executable, '-c', {connect!r}]), 0)\n"
        f"os.waitpid(spawn(['/bin/sh', '-c', {shell!r}]), 0)",
        "posix_spawn": f"import os\nos.posix_spawn('/bin/sh', ['sh', '-c', {shell!r}], {{}})",
        "environ": f"print(open('/proc/{t.parent}/environ').read())\nimport os\nprint(os.environ)\n"
        "import glob\nfor p in glob.glob('/proc/*/environ'):\n    print(p, open(p).read())",
        "files": f"for p in ({str(t.home_file)!r}, {str(t.cwd_file)!r}, 'secret.txt', '../secret.txt'):\n"
        "    try:\n        print(open(p).read())\n    except OSError as e:\n        print(e)",
        "write": f"open({str(t.outside / 'by-open')!r}, 'w').write('PWNED')",
        "fork_bomb": SPAWN + f"spawn(['/bin/sh', '-c', 'f(){{ f | f & }}; f', {MARKER!r}])\n"
        "import time\ntime.sleep(1.5)",  # then exits: the PID namespace ends with every process in it
        "memory_bomb": "x = bytearray(4 * 1024**3)\nprint('ALLOCATED')",
        "memory_bomb_child": SPAWN + "os.waitpid(spawn([sys.executable, '-c', "
        "'x = bytearray(4 * 1024**3); print(\"ALLOCATED\")']), 0)",
        "infinite_loop": "while True:\n    pass",
        "nested_namespaces": SPAWN + f"os.waitpid(spawn(['/bin/sh', '-c', {nested!r}]), 0)",
    }


def effects(t: Targets, listener: socket.socket) -> list[str]:
    """What the attacks achieved outside the sandbox: empty when the sandbox held."""
    found = [str(p) for p in t.outside.iterdir()]
    written = (f"/tmp/{MARKER}-tmp", *(f"{p}/{MARKER}" for p in (*site_dirs(), "/usr")))
    found += [p for p in written if os.path.exists(p)]
    listener.setblocking(False)
    try:
        listener.accept()
        found.append("a connection reached the loopback listener")
    except BlockingIOError:
        pass
    return found + [f"process left: {pid}" for pid in leftovers()]


def leftovers() -> list[str]:
    alive = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and MARKER.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                alive.append(pid)
        except OSError:
            continue
    return alive


@contextmanager
def loopback_listener() -> Iterator[socket.socket]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener


def nobody_layout(base: Path, port: int) -> Targets:
    """A home, a working directory (each with a secret file) and a folder anyone may write."""
    for name in ("home", "cwd", "outside"):
        (base / name).mkdir()
        (base / name).chmod(0o777 if name == "outside" else 0o700)
        os.chown(base / name, NOBODY, NOBODY)
    for name in ("home", "cwd"):
        (base / name / "secret.txt").write_text(SECRET)
        os.chown(base / name / "secret.txt", NOBODY, NOBODY)
    return Targets(PARENT, port, base / "home" / "secret.txt", base / "cwd" / "secret.txt", base / "outside")


def _closed_ancestors(paths: list[Path]) -> dict[Path, list[str]]:
    """Folders others cannot enter (outermost first), each with its children on the way."""
    found: dict[Path, list[str]] = {}
    for path in paths:
        for parent in reversed(path.parents):
            child = path.relative_to(parent).parts[0]
            if not os.stat(parent).st_mode & stat.S_IXOTH and child not in found.setdefault(parent, [child]):
                found[parent].append(child)
    return {folder: children for folder, children in found.items() if children}


def nobody_command(argv: list[str], stash: Path) -> list[str]:
    """``argv`` as nobody, where the interpreter, venv and repository may sit under root-only
    folders (CI: /root/.pyenv): in a private mount namespace, each such folder is covered by
    an open tmpfs holding binds of only the children on the way; then ``setpriv`` to nobody."""
    needed = [Path(sys.base_prefix).resolve(), Path(sys.prefix), REPO]
    script = ["set -e"]
    for i, (closed, children) in enumerate(_closed_ancestors(needed).items()):
        keep, folder = shlex.quote(str(stash / str(i))), shlex.quote(str(closed))
        script += [f"mkdir -p {keep}", f"mount --rbind {folder} {keep}"]
        script.append(f"mount -t tmpfs -o mode=755 tmpfs {folder}")  # open, and holding only:
        for child in children:
            inner = shlex.quote(str(closed / child))
            script += [f"mkdir -p {inner}", f"mount --rbind {keep}/{shlex.quote(child)} {inner}"]
    drop = f"setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups --inh-caps=-all --bounding-set=-all"
    script.append(f'exec {drop} "$@"')
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(script), "sh", *argv]


DRIVER = """
import anyio, json, os, sys
sys.path.insert(0, sys.argv[1])
from strategies.llmcompiler.tools import python as sandbox
from strategies.llmcompiler.tools.sandbox import isolation
codes = json.loads(sys.argv[2])
async def main():
    out = {}
    for name, code in codes.items():
        r = await sandbox.run_sandboxed(code.replace(sys.argv[3], str(os.getpid())), timeout_s=4.0, cpu_s=2,
                                        memory_mb=256, max_processes=16)
        out[name] = [r.output, r.returncode, r.killed, r.isolation]
    print(json.dumps({"uid": os.getuid(), "probe": isolation().kind, "results": out}))
anyio.run(main)
"""


def run_as_nobody(codes: dict[str, str], cwd: Path, home: Path, env: dict[str, str]) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="paragen-stash-") as stash:
        argv = [sys.executable, "-c", DRIVER, str(REPO), json.dumps(codes), str(PARENT)]
        done = subprocess.run(
            nobody_command(argv, Path(stash)),
            cwd=cwd,
            env={**env, "HOME": str(home), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"driver as nobody failed ({done.returncode}): {done.stderr[-2000:]}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
