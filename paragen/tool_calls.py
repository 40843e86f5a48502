"""Function calls (OpenAI's ``tool_calls``): joined from stream pieces, and compared.

A server streams a call in pieces: the first names it (``id``, ``function.name``), the rest
add to ``function.arguments``; some servers (llama-cpp-python) repeat the id and name on every
piece. :func:`merge` joins the pieces of one choice into whole calls, in OpenAI's message
format. :func:`canonical_arguments` makes two calls' arguments comparable whatever their key
order or spacing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any


def merge(pieces: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Whole calls from streamed pieces, ordered by their ``index``."""
    calls: dict[int, dict[str, Any]] = {}
    for piece in pieces:
        index = piece.get("index", len(calls))
        index = index if isinstance(index, int) else len(calls)
        call = calls.setdefault(
            index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if piece.get("id") and not call["id"]:
            call["id"] = piece["id"]
        function = piece.get("function") or {}
        if function.get("name") and not call["function"]["name"]:
            call["function"]["name"] = function["name"]
        call["function"]["arguments"] += function.get("arguments") or ""
    return [calls[i] for i in sorted(calls)]


def canonical_arguments(arguments: str) -> str:
    """The arguments as canonical JSON (keys sorted, no spaces); text that is not JSON, stripped."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments.strip()
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def name_of(call: dict[str, Any]) -> str:
    return str((call.get("function") or {}).get("name", ""))


def arguments_of(call: dict[str, Any]) -> str:
    return canonical_arguments(str((call.get("function") or {}).get("arguments", "")))


__all__ = ["arguments_of", "canonical_arguments", "merge", "name_of"]
