"""``paragen serve``: an OpenAI-compatible HTTP server that answers with a strategy.

    paragen serve --backend engine --port 8000
    client.chat.completions.create(model="ffs-8/smollm2", messages=[...])

The strategy comes from the model name (``STRATEGY[-N]/MODEL``) or from the extra body
field ``paragen``; a plain model name is one sample, passed through. Every request is one
Orchestrator run over the server's one backend, so concurrent clients share it (the
engine batches across them); a client that disconnects cancels its run.

Nothing here is imported by ``paragen --help``: the ASGI stack (starlette, uvicorn,
sse-starlette) is imported when :func:`create_app` or the ``serve`` command runs.
See docs/serve.md for the wire format and its extensions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from paragen.serve.app import create_app
    from paragen.serve.config import ServeConfig
    from paragen.serve.server import serve_in_thread

__all__ = ["ServeConfig", "create_app", "serve_in_thread"]


def __getattr__(name: str) -> Any:
    # Lazy, so importing paragen.serve (the CLI does, for its command) stays light.
    if name == "create_app":
        from paragen.serve.app import create_app

        return create_app
    if name == "ServeConfig":
        from paragen.serve.config import ServeConfig

        return ServeConfig
    if name == "serve_in_thread":
        from paragen.serve.server import serve_in_thread

        return serve_in_thread
    raise AttributeError(f"module 'paragen.serve' has no attribute {name!r}")
