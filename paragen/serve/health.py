"""The backend's replicas, checked in the background for the server's lifetime.

The backend is opened once when the server starts (an OpenAI-compatible pool probes its
replicas there); a replica that was down is then the job of a background task that asks
it, every health interval, whether it is back. Requests never probe: each run's
Orchestrator finds the backend open, so one dead replica costs no request any time.
"""

from __future__ import annotations

import logging

from anyio.abc import TaskGroup

from paragen.backends.base import Backend, open_backend
from paragen.errors import BackendError

log = logging.getLogger("paragen.serve")


async def start_health_checks(backend: Backend, tg: TaskGroup) -> None:
    """Open ``backend`` now and start its background health check in ``tg``, where it has one.

    A backend none of whose servers answers yet is not fatal: each request tries to open
    it again (and fails with a 502) until one does."""
    try:
        await open_backend(backend)
    except BackendError as exc:
        log.warning("the backend did not open at start: %s", exc.one_line())
    watch = getattr(backend, "watch_health", None)
    if watch is not None:
        tg.start_soon(watch, name="paragen serve: replica health checks")
