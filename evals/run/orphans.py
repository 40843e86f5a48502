"""A ``--procs`` child ends with its parent, however the parent ends.

The parent's own Ctrl-C and SIGTERM already stop its children (evals.run.procs), but ``kill -9``
or a crash runs no handler. So each child watches for itself: the parent sets ``PARAGEN_PARENT_PID``
in the child's environment, and a daemon thread in the child compares it with ``os.getppid()``,
which changes the moment the parent dies (the child is re-parented), where a test of the pid would
see a dead parent that is not yet reaped (a zombie) as alive. On a change the child sends itself
SIGTERM, so it records what it finished and closes its backend as on any SIGTERM, and exits outright
if that takes past a grace period. Its grading pool watches it in turn (evals.run.grading), so
nothing of the sweep outlives it.
"""

from __future__ import annotations

import os
import signal
import threading
import time

PARENT_ENV = "PARAGEN_PARENT_PID"
POLL_S = 0.25
GRACE_S = 5.0


def parent_env() -> dict[str, str]:
    """The environment variable a child is started with: this process's pid."""
    return {PARENT_ENV: str(os.getpid())}


def exit_with_parent() -> None:
    """In a child started with :func:`parent_env`: end when the parent does (no-op otherwise)."""
    wanted = os.environ.pop(PARENT_ENV, "")  # not inherited further: only a direct child watches
    if not wanted.isdigit():
        return
    parent = int(wanted)
    if os.getppid() != parent:  # the parent died before this child got here
        os._exit(128 + signal.SIGTERM)
    threading.Thread(target=_watch, args=(parent,), name="parent-watch", daemon=True).start()


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_S)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(GRACE_S)
    os._exit(128 + signal.SIGTERM)
