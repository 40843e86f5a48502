"""Function calls (OpenAI's ``tool_calls``), joined from stream pieces.

A server streams a call in pieces: the first names it (``id``, ``function.name``), the rest
add to ``function.arguments``; some servers (llama-cpp-python) repeat the id and name on every
piece. :func:`merge` joins the pieces of one choice into whole calls, in OpenAI's message
format.
"""

from __future__ import annotations

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


__all__ = ["merge"]
