"""Tools as a small plugin surface: an async function plus a pydantic model of its arguments.

A tool is declared with :func:`tool`::

    class EchoArgs(BaseModel):
        text: str

    @tool("echo", "echo(text: str) -> str: repeats the text.")
    async def echo(args: EchoArgs) -> str:
        return args.text

The argument model is read from the function's first parameter annotation. Keyword-only
parameters of the function are *options* fixed when a run is configured (the lookup tool's
document folder, for instance): ``tool.bind(root="docs/")``. Third-party tools register
under the entry-point group ``paragen.tools`` (``paragen.registry.TOOL_GROUP``).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, get_type_hints

from pydantic import BaseModel, ValidationError

from paragen.errors import ConfigError, describe_invalid
from paragen.registry import TOOL_GROUP, load, register

ToolFn = Callable[..., Awaitable[str]]


class ToolInputError(ValueError):
    """The arguments a model wrote do not fit the tool: the message goes back to the model."""


@dataclass(frozen=True)
class Tool:
    """One callable tool: its name, the description shown to the model, its argument model."""

    name: str
    description: str
    args_model: type[BaseModel]
    fn: ToolFn
    options: Mapping[str, Any] = field(default_factory=dict)

    def bind(self, **options: Any) -> Tool:
        """A copy with options fixed (the function's keyword-only parameters)."""
        allowed = _keyword_only(self.fn)
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise ConfigError(
                f"tool {self.name!r} has no option(s) {unknown}", hint=f"options: {sorted(allowed)}"
            )
        return replace(self, options={**self.options, **options})

    def validate(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> BaseModel:
        """Positional arguments fill the model's fields in order; keywords by name."""
        names = list(self.args_model.model_fields)
        if len(args) > len(names):
            raise ToolInputError(f"{self.name} takes at most {len(names)} argument(s), got {len(args)}")
        values = {**dict(zip(names, args, strict=False)), **kwargs}
        try:
            return self.args_model.model_validate(values)
        except ValidationError as exc:
            raise ToolInputError(f"{self.name}: {describe_invalid(exc, whole='arguments')}") from exc

    async def __call__(self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None) -> str:
        model = self.validate(args, kwargs or {})
        return await self.fn(model, **self.options)


def tool(name: str, description: str) -> Callable[[ToolFn], Tool]:
    """Decorator: turn ``async def f(args: ArgsModel, *, option=...) -> str`` into a :class:`Tool`."""

    def wrap(fn: ToolFn) -> Tool:
        if not inspect.iscoroutinefunction(fn):
            raise ConfigError(f"tool {name!r} must be an async function")
        params = list(inspect.signature(fn).parameters.values())
        hints = get_type_hints(fn)
        model = hints.get(params[0].name) if params else None
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise ConfigError(f"tool {name!r}: the first parameter must be annotated with a pydantic model")
        return Tool(name=name, description=description, args_model=model, fn=fn)

    return wrap


def _keyword_only(fn: ToolFn) -> set[str]:
    params = inspect.signature(fn).parameters.values()
    return {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}


_BUILTIN = {
    "calculator": "strategies.llmcompiler.tools.calculator:calculator",
    "python": "strategies.llmcompiler.tools.python:python",
    "lookup": "strategies.llmcompiler.tools.lookup:lookup",
}


def load_tool(name: str) -> Tool:
    """A tool by name: registered plugins first, then the built-ins (so they work uninstalled)."""
    found = load(TOOL_GROUP, name, _BUILTIN)
    if not isinstance(found, Tool):
        raise ConfigError(f"tool {name!r} is not a Tool (decorate it with strategies.llmcompiler.tools.tool)")
    return found


def load_tools(
    names: Sequence[str], options: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, Tool]:
    """Tools by name, each bound to its options (``{"lookup": {"root": "docs/"}}``)."""
    options = options or {}
    unknown = sorted(set(options) - set(names))
    if unknown:
        raise ConfigError(f"options given for tools not in use: {unknown}")
    return {name: load_tool(name).bind(**options.get(name, {})) for name in names}


__all__ = ["Tool", "ToolInputError", "load_tool", "load_tools", "register", "tool"]
