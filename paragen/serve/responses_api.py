"""OpenAI's Responses API (``POST /v1/responses``): the request read as a chat request, the answer
written as a ``response`` object, or streamed as its typed events.

A request is text (``input: "..."``) or messages (``input: [{"role": ..., "content": ...}]``, content
as text or ``input_text`` parts), with ``instructions`` as the system message; the model name picks
the strategy exactly as for chat (``ffs-8/smollm2``), and the ``paragen`` field is the same. Nothing
is stored: ``previous_response_id`` is refused, and so are tools (the Responses API's tool items are
not mapped). The answer is one assistant message of ``output_text``, after a ``reasoning`` item
holding the thinking as ``reasoning_text`` where the result has some (no summary); ``usage`` has
input, output (every generated token, as ``completion_tokens`` in chat; of them the thinking's in
``output_tokens_details.reasoning_tokens``) and cached tokens, plus ``usage.paragen``.
Streamed: ``response.created``, ``response.in_progress``, then each item as OpenAI streams it: its
``output_item.added`` and ``content_part.added``, its deltas (``reasoning_text.delta`` for the
thinking, ``output_text.delta`` for the answer: a pass-through's as they come, a strategy's in one
each), its ``.done`` events; then ``response.completed`` (``response.incomplete`` when the output
was cut by ``max_output_tokens``, a budget or a deadline), each with its ``sequence_number``. Items
are opened as their first piece comes: thinking that streams after answer text (a server that
interleaves them) opens an item of its own after the message, so the stream and the final
``output`` list the same items in the same order.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, model_validator

from paragen.serve import replies
from paragen.serve.errors import APIError
from paragen.serve.routing import Plan
from paragen.serve.wire import ChatRequest, Message, ParagenOptions
from paragen.types import Model, StrategyResult


class InputText(Model):
    type: Literal["input_text", "output_text", "text"]
    text: str
    annotations: list[Any] | None = None  # output_text parts of an earlier answer carry them


class InputMessage(Model):
    type: Literal["message"] = "message"
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[InputText]
    id: str | None = None
    status: str | None = None

    def chat(self) -> Message:
        content = self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)
        return Message(role=self.role, content=content)


class TextFormat(Model):
    """``text.format``: OpenAI's output format; only plain text is produced here."""

    type: str
    name: str | None = None  # json_schema's fields, accepted so the refusal names the type
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None
    description: str | None = None


class TextOptions(Model):
    """The ``text`` field of a Responses request."""

    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ResponsesRequest(Model):
    """POST /v1/responses (text or message input; no tools, nothing stored)."""

    model: str = Field(min_length=1)
    input: str | list[InputMessage] = Field(min_length=1)
    instructions: str | None = None
    stream: bool = False
    max_output_tokens: int | None = Field(default=None, gt=0)
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None  # not OpenAI's; as for chat
    seed: int | None = None  # not OpenAI's; as for chat
    metadata: dict[str, str] | None = None
    store: bool | None = None  # nothing is stored either way
    user: str | None = None
    text: TextOptions | None = None
    truncation: Literal["disabled"] | None = None
    parallel_tool_calls: bool | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | None = None
    previous_response_id: str | None = None
    stream_options: dict[str, Any] | None = None
    paragen: ParagenOptions = Field(default_factory=ParagenOptions)

    @model_validator(mode="after")
    def _supported(self) -> ResponsesRequest:
        if self.previous_response_id is not None:
            raise ValueError("previous_response_id: paragen serve stores no responses; send the whole input")
        if self.tools or self.tool_choice not in (None, "none", "auto"):
            raise ValueError("tools are not supported on /v1/responses; use /v1/chat/completions")
        text_format = self.text.format if self.text is not None else None
        if text_format is not None and text_format.type != "text":
            raise ValueError("only text output (text.format.type 'text') is supported")
        return self

    def chat(self) -> ChatRequest:
        """The same request as a chat request (what the router plans)."""
        messages = [Message(role="system", content=self.instructions)] if self.instructions else []
        if isinstance(self.input, str):
            messages.append(Message(role="user", content=self.input))
        else:
            messages.extend(item.chat() for item in self.input)
        return ChatRequest(
            model=self.model,
            messages=messages,
            max_tokens=self.max_output_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            seed=self.seed,
            paragen=self.paragen,
        )


def new_id() -> str:
    return _new_id("resp")


@dataclass(slots=True)
class _Item:
    """One output item as it streams: the thinking (a ``reasoning`` item) or the answer (a ``message``)."""

    kind: Literal["reasoning", "message"]
    id: str
    index: int  # its output_index
    pieces: list[str] = field(default_factory=list)
    status: str = "in_progress"


class ResponsesWire:
    """The ``response`` object, or its stream of typed events (see the module docstring)."""

    def __init__(self, plan: Plan, request: ResponsesRequest) -> None:
        self.plan = plan
        self.request = request
        self.created = int(time.time())
        self._sequence = 0
        self._items: list[_Item] = []  # streamed so far, in output order; the last may be open
        self._open: _Item | None = None

    # -- whole answers -------------------------------------------------------------------------------

    def answer(self, results: list[StrategyResult]) -> dict[str, Any]:
        [result] = results
        status, text = self._status(result), replies.answer_text(result)
        output = []
        if result.reasoning:  # a thought is cut only where no answer followed it
            output.append(_reasoning(_new_id("rs"), result.reasoning, status if not text else "completed"))
        output.append(_message(_new_id("msg"), text, status))
        return self._response(result, output)

    def _status(self, result: StrategyResult) -> str:
        return "incomplete" if replies.finish_reason(self.plan, result) == "length" else "completed"

    def _response(self, result: StrategyResult | None, output: list[dict[str, Any]]) -> dict[str, Any]:
        """The response object: in progress (no result yet), or finished with ``output``."""
        request = self.request
        body: dict[str, Any] = {
            "id": self.plan.id,
            "object": "response",
            "created_at": self.created,
            "status": "in_progress",
            "model": self.plan.model,
            "output": [],
            "error": None,
            "incomplete_details": None,
            "instructions": request.instructions,
            "max_output_tokens": request.max_output_tokens,
            "metadata": request.metadata or {},
            "parallel_tool_calls": True,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "tool_choice": "auto",
            "tools": [],
            "text": {"format": {"type": "text"}},
            "truncation": "disabled",
            "store": False,
            "usage": None,
        }
        if result is None:
            return body
        body["status"] = self._status(result)
        if body["status"] == "incomplete":
            body["incomplete_details"] = {"reason": "max_output_tokens"}
        body["output"] = output
        body["usage"] = usage([result])
        body["paragen"] = replies.choice_extension(self.plan, result, self.request.paragen.include_result)
        return body

    # -- streamed -------------------------------------------------------------------------------------

    def opening(self) -> list[bytes]:
        in_progress = self._response(None, [])
        return [
            self._event("response.created", response=in_progress),
            self._event("response.in_progress", response=in_progress),
        ]

    def text(self, index: int, text: str) -> bytes:
        item, frames = self._item("message")
        item.pieces.append(text)
        delta = self._event("response.output_text.delta", **_part_of(item), delta=text, logprobs=[])
        return frames + delta

    def reasoning(self, index: int, text: str) -> bytes:
        """Thinking as a ``reasoning`` item's ``reasoning_text``, streamed before the answer's message."""
        item, frames = self._item("reasoning")
        item.pieces.append(text)
        return frames + self._event("response.reasoning_text.delta", **_part_of(item), delta=text)

    def closing(self, results: list[StrategyResult]) -> list[bytes]:
        [result] = results
        frames = []
        text = replies.answer_text(result)
        if self.plan.strategy_name is not None:  # a pass-through's thinking and text have streamed
            if result.reasoning:
                frames.append(self.reasoning(0, result.reasoning))
            if text:
                frames.append(self.text(0, text))
        status = self._status(result)
        frames.append(self._close(status))  # a thought still open here was cut, if the output was
        if not any(item.kind == "message" for item in self._items):  # the answer, empty or not
            frames += [self._item("message")[1], self._close(status)]
        final = self._response(result, [_done(item, item.status) for item in self._items])
        frames.append(self._event(f"response.{final['status']}", response=final))
        return frames

    def _item(self, kind: Literal["reasoning", "message"]) -> tuple[_Item, bytes]:
        """The item open for ``kind``: the one streaming, or a new one after it (closed, then)."""
        if self._open is not None and self._open.kind == kind:
            return self._open, b""
        frames = self._close("completed")
        item = _Item(kind, _new_id("rs" if kind == "reasoning" else "msg"), len(self._items))
        self._items.append(item)
        self._open = item
        added = {**_done(item, "in_progress"), "content": []}
        part = {"type": "reasoning_text", "text": ""} if kind == "reasoning" else _output_text("")
        frames += self._event("response.output_item.added", output_index=item.index, item=added)
        return item, frames + self._event("response.content_part.added", **_part_of(item), part=part)

    def _close(self, status: str) -> bytes:
        """The ``.done`` events of the open item, if one is open."""
        item, self._open = self._open, None
        if item is None:
            return b""
        item.status = status
        done = _done(item, status)
        [part] = done["content"]
        if item.kind == "reasoning":
            text_done = self._event("response.reasoning_text.done", **_part_of(item), text=part["text"])
        else:
            text_done = self._event(
                "response.output_text.done", **_part_of(item), text=part["text"], logprobs=[]
            )
        return (
            text_done
            + self._event("response.content_part.done", **_part_of(item), part=part)
            + self._event("response.output_item.done", output_index=item.index, item=done)
        )

    def failure(self, error: APIError) -> bytes:
        detail = error.body()["error"]
        return self._event("error", code=detail["code"], message=detail["message"], param=detail["param"])

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        return b"event: " + kind.encode() + b"\r\n" + replies.sse_data(text)


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _part_of(item: _Item) -> dict[str, Any]:
    return {"item_id": item.id, "output_index": item.index, "content_index": 0}


def _done(item: _Item, status: str) -> dict[str, Any]:
    text = "".join(item.pieces)
    return (_reasoning if item.kind == "reasoning" else _message)(item.id, text, status)


def _reasoning(item_id: str, text: str, status: str) -> dict[str, Any]:
    """A reasoning item with the thinking as its text (no summary: none is made)."""
    content = [{"type": "reasoning_text", "text": text}]
    return {"type": "reasoning", "id": item_id, "summary": [], "content": content, "status": status}


def _message(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": [_output_text(text)],
    }


def usage(results: list[StrategyResult]) -> dict[str, Any]:
    """The Responses API's usage: chat's counts under its names, with ``paragen`` beside them."""
    chat = replies.usage(results)
    cached = chat.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    return {
        "input_tokens": chat["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": chat["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": chat["completion_tokens_details"]["reasoning_tokens"]},
        "total_tokens": chat["total_tokens"],
        "paragen": chat["paragen"],
    }


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


__all__ = ["ResponsesRequest", "ResponsesWire", "new_id", "usage"]
