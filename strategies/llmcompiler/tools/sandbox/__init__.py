"""How the python tool isolates a run: the probe, and the command line for each mode.

:func:`isolation` says, before any run, whether this machine can isolate the code and, if it
cannot, why, in one line naming the unsafe opt-in. :func:`command` builds the command for one
run. The two scripts beside this file run in the child (``jail.py`` inside the namespaces,
``runner.py`` last, around the code); they are passed as text, so neither the repository nor
a venv needs to be readable by the sandbox.
"""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

UNSAFE_ENV = "PARAGEN_PYTHON_TOOL_UNSAFE"
NOBODY = 65534
_HERE = Path(__file__).parent
_JAIL = (_HERE / "jail.py").read_text(encoding="utf-8")
_RUNNER = (_HERE / "runner.py").read_text(encoding="utf-8")
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC = ("/etc/ld.so.cache", "/etc/localtime")  # the loader's cache, the time zone; no more of /etc
_CAPS = ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
_PROBING = threading.Lock()
_NOROOT = "--securebits=+noroot,+noroot_locked,+no_setuid_fixup,+no_setuid_fixup_locked,+keep_caps_locked"


@dataclass(frozen=True)
class Isolation:
    """Which isolation a run gets here: ``kind`` is recorded on every result; ``refusal`` is
    the one line the tool answers with where there is none and the unsafe mode is not chosen."""

    kind: str
    refusal: str | None = None


def interpreter() -> str:
    """The interpreter's own executable (not a venv's link to it): the jail binds its prefix."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    return os.path.realpath(base)


def unsafe_requested(option: bool = False) -> bool:
    return option or os.environ.get(UNSAFE_ENV, "") not in ("", "0")


def isolation(unsafe: bool = False) -> Isolation:
    """What the next run gets: namespaces, the weak unsafe mode, or a refusal saying why."""
    with _PROBING:  # concurrent first runs wait for one probe
        problem = _probe()
    if problem is None:
        return Isolation(_namespace_kind())
    if unsafe_requested(unsafe):
        return Isolation("unsafe:rlimits+audit")
    return Isolation(
        "refused",
        f"python tool refused: no isolation on this machine ({problem}); to run model code with only "
        f"resource limits and an audit hook, which do not stop a determined program, set {UNSAFE_ENV}=1 "
        "or the tool option unsafe_no_isolation=true",
    )


def _namespace_kind() -> str:
    who = "nobody" if os.geteuid() == 0 else "userns-root-nocaps"
    return f"namespaces(mount,pid,net{'' if os.geteuid() == 0 else ',user'})+{who}+rlimits+audit"


def command(folder: Path, limits: list[str], kind: str, timeout_s: float) -> list[str]:
    """The command line that runs ``folder/work/main.py`` under ``kind`` (from :func:`isolation`);
    ``timeout_s`` is the parent's, PID 1's own alarm a backstop a little later."""
    work = folder / "work"
    if kind.startswith("unsafe"):
        return [sys.executable, "-I", "-c", _RUNNER, str(work.resolve()), str(work / "main.py"), *limits]
    return _jailed(folder, ["/sandbox", "/sandbox/main.py", *limits], math.ceil(timeout_s) + 2)


def _jailed(folder: Path, runner_args: list[str], deadline_s: int) -> list[str]:
    python = interpreter()
    root = os.geteuid() == 0
    drop = [f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *_CAPS] if root else [*_CAPS, _NOROOT]
    (folder / "root").mkdir(exist_ok=True)
    config = {
        "owner": NOBODY if root else 0,  # of /sandbox: the code's user, nobody or the namespace's root
        "root": str((folder / "root").resolve()),
        "work": str((folder / "work").resolve()),
        "ro": [*_SYSTEM, *_ETC, *_prefixes(python), *site_dirs()],
        "deadline_s": deadline_s,
        "argv": [_which("setpriv"), *drop, python, "-I", "-c", _RUNNER, *runner_args, *site_dirs()],
    }
    user = [] if root else ["--user", "--map-root-user"]
    unshare = [_which("unshare"), *user, "--mount", "--pid", "--net", "--fork", "--kill-child"]
    return [*unshare, python, "-I", "-S", "-c", _JAIL, json.dumps(config)]


def _which(tool: str) -> str:
    """The tool's real path, found on this process's PATH (the child's PATH is a fixed one)."""
    return os.path.realpath(shutil.which(tool) or f"/usr/bin/{tool}")


def _prefixes(python: str) -> list[str]:
    """The interpreter's installation, unless a system directory already holds it."""
    prefix = os.path.realpath(sys.base_prefix)
    if not python.startswith(prefix + os.sep):
        prefix = os.path.dirname(os.path.dirname(python))
    inside = any(prefix == d or prefix.startswith(d + os.sep) for d in _SYSTEM)
    return [] if inside else [prefix]


def site_dirs() -> list[str]:
    """The venv's package folders (and those its .pth files add), read-only in the new root and
    on the code's path, so it imports what the parent could; never the repository itself."""
    base = os.path.realpath(sys.base_prefix) + os.sep
    found = [os.path.realpath(p) for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    return [p for p in dict.fromkeys(found) if os.path.isdir(p) and not p.startswith(base)]


@functools.cache
def _probe() -> str | None:
    """None where a jailed run works here, else why not (cached: the kernel does not change)."""
    for tool in ("unshare", "setpriv"):
        if shutil.which(tool) is None:
            return f"{tool} (util-linux) is not on PATH"
    with tempfile.TemporaryDirectory(prefix="paragen-probe-") as tmp:
        folder = Path(tmp)
        os.chmod(folder, 0o755)
        (folder / "work").mkdir()
        (folder / "work" / "main.py").write_text("print('ok')\n", encoding="utf-8")
        args = _jailed(folder, ["/sandbox", "/sandbox/main.py", "5", str(256 << 20), "16", str(1 << 20)], 15)
        try:
            done = subprocess.run(args, capture_output=True, timeout=20, check=False, env=clean_env())
        except (OSError, subprocess.SubprocessError) as exc:
            return f"unshare failed: {exc}"
    if done.returncode == 0 and done.stdout.strip() == b"ok":
        return None
    lines = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()
    return f"unshare failed: {lines[-1] if lines else f'exit status {done.returncode}'}"


def clean_env() -> dict[str, str]:
    """The whole environment of the sandbox: nothing of the parent's (API keys) passes."""
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/sandbox"}


__all__ = ["UNSAFE_ENV", "Isolation", "clean_env", "command", "interpreter", "isolation", "unsafe_requested"]
