"""Lazy plugin lookup through entry points.

Built-in strategies and backends register through the same entry-point groups a
third-party package uses ("paragen.strategies", "paragen.backends"), so there is
one path for both. CLI commands come the same way ("paragen.commands": a callable
that adds its commands to the typer app), which is how the eval harness adds
``eval`` and ``report`` without the core ever importing it. Nothing is imported
until a name is asked for: listing plugins reads only metadata, which keeps
``paragen --help`` free of torch and vllm.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from paragen.config import parse_backend_spec, split_credentials
from paragen.errors import ConfigError, PluginBrokenError, PluginNotFoundError

if TYPE_CHECKING:
    from paragen.backends.base import Backend

STRATEGY_GROUP = "paragen.strategies"
BACKEND_GROUP = "paragen.backends"
JUDGE_GROUP = "paragen.judges"
TOOL_GROUP = "paragen.tools"
COMMAND_GROUP = "paragen.commands"

_KINDS = {
    STRATEGY_GROUP: "strategy",
    BACKEND_GROUP: "backend",
    JUDGE_GROUP: "judge",
    TOOL_GROUP: "tool",
    COMMAND_GROUP: "command",
}
_extra: dict[str, dict[str, Any]] = {group: {} for group in _KINDS}


def _entry_points(group: str) -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=group)}


def names(group: str) -> list[str]:
    """Every name registered in ``group``, without importing any plugin."""
    return sorted({*_entry_points(group), *_extra[group]})


def register(group: str, name: str, obj: Any) -> None:
    """Register ``obj`` under ``name`` at run time (tests, notebooks); entry points are the normal way."""
    if group not in _extra:
        raise ConfigError(f"unknown plugin group {group!r}", hint=f"use one of {sorted(_extra)}")
    _extra[group][name] = obj


def load(group: str, name: str) -> Any:
    """The plugin object registered as ``name``; a clear error listing what exists otherwise."""
    if name in _extra[group]:
        return _extra[group][name]
    found = _entry_points(group).get(name)
    if found is None:
        raise PluginNotFoundError(_KINDS[group], name, names(group))
    try:
        return found.load()
    except ImportError as exc:
        raise ConfigError(
            f"{_KINDS[group]} {name!r} could not be imported: {exc}",
            hint="install the extra it needs (e.g. pip install 'paragen[engine]')",
        ) from exc
    except Exception as exc:  # a broken plugin (a missing attribute, an error at import) is the user's
        raise PluginBrokenError(_KINDS[group], name, found.value, exc) from exc


def load_strategy(name: str) -> Any:
    return load(STRATEGY_GROUP, name)


def load_backend(name: str) -> Any:
    return load(BACKEND_GROUP, name)


def resolve_backend(
    spec: str,
    options: dict[str, Any] | None = None,
    *,
    model: str | None = None,
    base_url: str | None = None,
) -> tuple[Any, str | None, dict[str, Any]]:
    """The backend class, target and options that a ``kind[:target]`` spec and the common flags name.

    ``model`` is the served model's name for a server backend and the model path for the engine
    (when the spec names none); ``base_url`` is the openai backend's server. Credentials in a URL
    target leave it and become the backend's ``api_key``, so the target may be shown and recorded.
    """
    kind, target = parse_backend_spec(spec)
    options = dict(options or {})
    if base_url is not None:
        if kind != "openai":
            raise ConfigError(
                "--base-url is for the openai backend", hint=f"the {kind} backend takes a target"
            )
        target = target or base_url
    target, secret = split_credentials(target)
    if secret is not None:
        if "api_key" in options:
            raise ConfigError("two API keys given: one in the URL and --backend-opt api_key", hint="give one")
        options["api_key"] = secret
    cls = load_backend(kind)
    if model is not None:
        if kind == "engine":
            target = target or model
        else:
            options["model"] = model
    return cls, target, options


def build_backend(
    spec: str,
    options: dict[str, Any] | None = None,
    *,
    model: str | None = None,
    base_url: str | None = None,
) -> Backend:
    """A backend from a ``kind[:target]`` spec: the one place the CLI, the harness and ``solve`` build one."""
    cls, target, options = resolve_backend(spec, options, model=model, base_url=base_url)
    backend: Backend = cls.from_spec(target, **options)
    return backend
