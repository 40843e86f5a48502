"""The in-process engine on its default model (SmolLM2-135M-Instruct), for the demo and the results page.

Both show a language model's numbers or none: when the model cannot be loaded they stop with the
cause, never falling back to a scripted stand-in.
"""

from __future__ import annotations

from paragen.backends.base import Backend
from paragen.errors import ParagenError


class ModelUnavailable(Exception):
    """The demo's model could not be loaded; the demo stops instead of running without it."""


def make_backend(model: str | None = None) -> tuple[Backend, str]:
    """The engine with ``model`` (None: its default); ModelUnavailable, with the cause, if it cannot load."""
    name = model or "the engine's default, SmolLM2-135M-Instruct"
    try:
        from paragen.backends.engine import EngineBackend

        engine: Backend = EngineBackend.from_spec(model)
    except (ImportError, ParagenError, OSError) as exc:
        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ModelUnavailable(
            f"the demo's model ({name}) could not be loaded: {type(exc).__name__}: {cause} "
            "(`make setup` installs the default one); no numbers are shown without the model"
        ) from exc
    return engine, "engine" if model is None else f"engine:{model}"
