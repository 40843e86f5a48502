"""Lazy plugin lookup through entry points.

Built-in strategies and backends register through the same entry-point groups a
third-party package uses ("paragen.strategies", "paragen.backends"), so there is
one path for both. CLI commands come the same way ("paragen.commands": a callable
that adds its commands to the typer app), which is how the eval harness adds
``eval`` and ``report`` without the core ever importing it. Nothing is imported
until a name is asked for: listing plugins reads only metadata, which keeps
``paragen --help`` free of torch and vllm.

:func:`resolve` is the one lookup of a ``package.module:attribute`` spec: the judges' and
tools' built-ins are listed as such, a judge may be named by one in place of a registered name,
and best-of-n's and PDR's rankers are given as one. Every spec that does not import fails the
same way, as a :class:`PluginNotFoundError` whose one line says which part is missing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
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
# Groups whose plugins may be named by ``module:attribute``. Not backends (a backend spec's colon
# parts kind from target), strategies, commands, nor tools (a plan calls a tool by its name).
_SPEC_GROUPS = frozenset({JUDGE_GROUP})


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


def load(group: str, name: str, builtins: Mapping[str, str] | None = None) -> Any:
    """The plugin object registered as ``name``; a clear error listing what exists otherwise.

    ``builtins`` (name -> ``module:attribute``) are the group's own plugins, found after the
    registered ones so that they work uninstalled too. A judge may also be named by a
    ``module:attribute`` spec (:func:`resolve`), which needs no registration.
    """
    if name in _extra[group]:
        return _extra[group][name]
    found = _entry_points(group).get(name)
    if found is None:
        builtins = builtins or {}
        if name in builtins:
            return resolve(builtins[name], _KINDS[group])
        takes_spec = group in _SPEC_GROUPS
        if takes_spec and ":" in name:
            return resolve(name, _KINDS[group], {*names(group), *builtins})
        raise PluginNotFoundError(_KINDS[group], name, {*names(group), *builtins}, takes_spec=takes_spec)
    try:
        return found.load()
    except ImportError as exc:
        raise ConfigError(
            f"{_KINDS[group]} {name!r} could not be imported: {exc}",
            hint="install the extra it needs (e.g. pip install 'paragen[engine]')",
        ) from exc
    except Exception as exc:  # a broken plugin (a missing attribute, an error at import) is the user's
        raise PluginBrokenError(_KINDS[group], name, found.value, exc) from exc


def resolve(spec: str, kind: str, available: Iterable[str] = ()) -> object:
    """The object ``package.module:attribute`` names (the attribute may be dotted: ``Class.method``).

    A spec that names nothing raises :class:`PluginNotFoundError` saying which part is missing;
    ``kind`` ("judge", "best_of_n scorer") and ``available`` (the names that would have done) make
    its one line. An error raised while importing the module is the module's and is reported as such.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise PluginNotFoundError(kind, spec, available, takes_spec=True)
    try:
        found: object = importlib.import_module(module_name)
    except ImportError as exc:  # the module or one it imports is missing
        raise PluginNotFoundError(kind, spec, available, reason=str(exc), takes_spec=True) from exc
    except Exception as exc:  # the module is there but fails at import: the user's code is broken
        raise PluginBrokenError(kind, spec, module_name, exc) from exc
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError as exc:
            reason = f"{module_name} has no attribute {attribute!r}"
            raise PluginNotFoundError(kind, spec, available, reason=reason, takes_spec=True) from exc
    return found


def resolve_function(
    spec: str, kind: str, builtins: Mapping[str, Callable[..., Any]] | None = None
) -> Callable[..., Any]:
    """A function by its built-in name or its ``module:function`` spec (:func:`resolve`)."""
    builtins = builtins or {}
    found = builtins[spec] if spec in builtins else resolve(spec, kind, builtins)
    if not callable(found):
        raise ConfigError(
            f"{kind} {spec!r} is not callable", hint="name a function: 'package.module:function'"
        )
    return found


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
