"""Running the app under uvicorn: in the foreground (the CLI) or in a thread (tests, notebooks).

The listening socket is bound here, before uvicorn starts, so a port that is taken is
one clear ConfigError instead of uvicorn's log line and exit code 1.
"""

from __future__ import annotations

import contextlib
import importlib.util
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette

from paragen.backends.base import Backend, open_backend
from paragen.errors import ConfigError

BACKLOG = 2048  # uvicorn's default


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (port 0: any free port), not yet listening.

    Binding early makes a taken port fail at once; listening waits for :func:`listen` so that a
    client never connects to a server still loading its model.
    """
    if not 0 <= port <= 65535:
        raise ConfigError(f"bad port {port}: it must be 0-65535 (0: any free port)")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}", hint="pick another port or host"
        ) from None
    sock.set_inheritable(True)
    return sock


def listen(sock: socket.socket) -> None:
    """Start queueing connections on ``sock``: call it before announcing the URL, since uvicorn only
    listens once its startup is done and a client that read the URL would be refused meanwhile."""
    sock.listen(BACKLOG)


def uvicorn_server(app: Starlette, *, log_level: str = "info", access_log: bool = True) -> uvicorn.Server:
    # Access log lines hold the method, path and status only: never a header, so never the key.
    config = uvicorn.Config(
        app, log_level=log_level, access_log=access_log, lifespan="on", timeout_graceful_shutdown=5
    )
    return uvicorn.Server(config)


def event_loop_options() -> dict[str, Any]:
    """anyio's asyncio options for a server: uvloop's event loop where it is installed (a C event
    loop: timers, callbacks and socket I/O cost a fraction of asyncio's pure-Python loop)."""
    return {"use_uvloop": importlib.util.find_spec("uvloop") is not None}


def run_in_foreground(main: Callable[[], Awaitable[None]]) -> None:
    """Run a server's ``main`` until it returns or is stopped by SIGINT/SIGTERM."""
    # uvicorn shuts down gracefully on SIGINT/SIGTERM and then raises the signal again; a server
    # stopped that way has done its job, so this returns normally (the command exits 0).
    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(main, backend_options=event_loop_options())


def run_server(
    app: Starlette, sock: socket.socket, *, log_level: str = "info", access_log: bool = True
) -> None:
    """Serve ``app`` on ``sock`` in the foreground, as ``paragen serve`` does."""

    async def main() -> None:
        await uvicorn_server(app, log_level=log_level, access_log=access_log).serve(sockets=[sock])

    run_in_foreground(main)


@contextmanager
def serve_in_thread(app: Starlette, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve ``app`` from a background thread; yields the base URL (``http://host:port/v1``)."""
    sock = bind(host, port)
    bound_port = sock.getsockname()[1]
    server = uvicorn_server(app, log_level="warning", access_log=False)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="paragen-serve", daemon=True
    )
    thread.start()
    try:
        _wait_started(server, thread)
        yield f"http://{host}:{bound_port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def _wait_started(server: uvicorn.Server, thread: threading.Thread, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the paragen serve thread did not start (see its log)")
        time.sleep(0.01)


async def served_model_names(backend: Backend, model: str | None) -> tuple[str, ...]:
    """The name the backend's model is served under: the server's for a remote backend,
    the checkpoint's file or folder name for the engine ("smollm2" for the default)."""
    server_info = getattr(backend, "server_info", None)
    pool = getattr(backend, "pool", None)
    if server_info is not None and pool is not None:  # an OpenAI-compatible server: ask it
        await open_backend(backend)  # probes every replica; one that is down is marked so
        replica = next((r for r in pool.replicas if r.info is not None), pool.replicas[0])
        info = await server_info(replica)
        return (str(info.model),)
    if backend.name == "engine":
        return (Path(model).name.removesuffix(".gguf") if model else "smollm2",)
    return (model or backend.name,)
