"""One writer per run folder: every command that writes a run folder (``eval``, ``merge``, the
``--procs`` parent on its ``--out`` and each child on its shard folder) holds the folder's lock for
as long as it writes.

The lock is ``FOLDER/.paragen.lock``, held with ``flock``: the kernel lets go of it when the holder
dies, however it dies (``kill -9`` included), so a dead holder's lock is taken over at once and a
live one's is refused with one line naming it. The file names its holder (pid, host, start time,
command). It stays in place when released, since removing a file another process may have just
opened would let two writers each hold "the" lock; only a folder the lock itself created, and in
which nothing else was written, is removed again (a refused command leaves nothing behind).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from paragen.errors import ConfigError

LOCK_NAME = ".paragen.lock"


class FolderLocked(ConfigError):
    """Another live process writes this run folder."""


@contextmanager
def run_folder_lock(folder: Path) -> Iterator[None]:
    """Hold ``folder``'s lock for the block (the folder is made if need be); FolderLocked, naming
    the holder, while another live process holds it."""
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_NAME
    with path.open("a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderLocked(
                f"{folder} is being written by {holder(path)}", hint="wait for it to end, or stop it"
            ) from None
        _write_holder(handle)
        try:
            yield
        finally:
            if created and is_empty(folder):
                _remove_quietly(path, folder)
            handle.seek(0)
            handle.truncate()
            fcntl.flock(handle, fcntl.LOCK_UN)


def is_empty(folder: Path) -> bool:
    """Whether ``folder`` holds nothing but its lock file (a missing folder is empty)."""
    if not folder.is_dir():
        return not folder.exists()
    return all(entry.name == LOCK_NAME for entry in folder.iterdir())


def holder(path: Path) -> str:
    """The holder a lock file names, as words: its pid, host and start time."""
    try:
        named = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        named = {}
    if not isinstance(named, dict) or "pid" not in named:
        return "another process"
    command = f", `{named['command']}`" if named.get("command") else ""
    return f"pid {named['pid']} on {named.get('host', '?')} (since {named.get('started', '?')}{command})"


def holder_pid(folder: Path) -> int | None:
    """The pid the folder's lock file names (its last holder's, if it is not held now)."""
    try:
        pid = json.loads((folder / LOCK_NAME).read_text(encoding="utf-8") or "{}").get("pid")
    except (OSError, ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) else None


def _write_holder(handle: IO[str]) -> None:
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps(_me()) + "\n")
    handle.flush()


def _me() -> dict[str, object]:
    args = [os.path.basename(sys.argv[0]), *sys.argv[1:]] if sys.argv else []
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join(args)[:200],
    }


def _remove_quietly(path: Path, folder: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()
        folder.rmdir()
