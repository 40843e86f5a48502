"""``paragen strategies`` and ``paragen backends``: one line per plugin, or one plugin's options.

The overview is one row per plugin, its description cut to the terminal's width, so that
thirty strategies fit on a screen; ``paragen strategies NAME`` lists that strategy's config
fields one per line, a long default (a prompt template) shortened to a line.
"""

from __future__ import annotations

import inspect
import re
import shutil
import typing
from typing import Any

from paragen.errors import ParagenError
from paragen.registry import load, names

_LONGEST_DEFAULT = 60


def description(plugin: object) -> str:
    """A plugin's one-line description: its ``description`` attribute, else its docstring's summary
    (the first paragraph, which PEP 257 keeps to one line, joined if it runs over)."""
    text = getattr(plugin, "description", None)
    if not isinstance(text, str) or not text.strip():
        # its own docstring: inspect.getdoc would fall back to BaseStrategy's, which says nothing of it
        text = inspect.cleandoc(getattr(plugin, "__doc__", None) or "").split("\n\n")[0]
    text = " ".join(text.split())
    # reST markup reads as noise in a terminal: ``x`` -> `x`, :class:`X` -> X
    text = re.sub(r":\w+:`([^`]+)`", r"\1", text)
    return text.replace("``", "`")


def list_plugins(group: str, kind: str) -> None:
    """One line per plugin, its name and description cut to the terminal's width; one that does not
    load says why, in full (the reason matters more than the layout)."""
    width = shutil.get_terminal_size().columns
    plugins = names(group)
    column = max((len(name) for name in plugins), default=4) + 2
    for name in plugins:
        try:
            plugin = load(group, name)
        except ParagenError as exc:
            print(f"{name:<{column}}unavailable: {exc.message}")
            continue
        print(f"{name:<{column}}{_fit(description(plugin), width - column)}".rstrip())
    print(f"`paragen {kind} NAME` lists one's options.")


def show_plugin(group: str, name: str, flag: str) -> None:
    """One plugin's description and its config fields (``name (default)``), one per line."""
    plugin = load(group, name)
    fields = getattr(getattr(plugin, "Config", None), "model_fields", {})
    print(f"{name}: {description(plugin)}")
    if not fields:
        print("no options")
        return
    print(f"options ({flag} KEY=VALUE):")
    for key, info in fields.items():
        print(f"  {describe_field(key, info)}")


def describe_field(name: str, info: Any) -> str:
    """``name (default)``; a field with a fixed set of values lists them (a preset's names, a layout's)."""
    if info.is_required():
        return f"{name} (required)"
    default = _short(repr(info.get_default(call_default_factory=True)))
    if typing.get_origin(info.annotation) is typing.Literal:
        choices = " | ".join(repr(c) for c in typing.get_args(info.annotation))
        return f"{name} ({default}; one of {choices})"
    return f"{name} ({default})"


def _short(text: str) -> str:
    """A default on one line: a prompt template's repr is kilobytes of text nobody reads here."""
    return _fit(text, _LONGEST_DEFAULT)


def _fit(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, cut with an ellipsis."""
    return text if len(text) <= width else text[: max(width - 3, 0)] + "..."
