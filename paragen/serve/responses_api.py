"""OpenAI's Responses API (``POST /v1/responses``): the request read as a chat request, the answer
written as a ``response`` object, or streamed as its typed events.

A request is text (``input: "..."``) or messages (``input: [{"role": ..., "content": ...}]``, content
as text or ``input_text`` parts), with ``instructions`` as the system message; the model name picks
the strategy exactly as for chat (``ffs-8/smollm2``), and the ``paragen`` field is the same. Nothing
is stored: ``previous_response_id`` is refused, and so are tools (the Responses API's tool items are
not mapped). The answer is one assistant message of ``output_text``; ``usage`` has input, output
(every generated token, as ``completion_tokens`` in chat) and cached tokens, plus ``usage.paragen``.
Streamed: ``response.created``, ``response.in_progress``, the message's ``output_item.added`` and
``content_part.added``, ``output_text.delta`` (a pass-through's tokens as they come; a strategy's
answer in one), the ``.done`` events, then ``response.completed`` (``response.incomplete`` when the
output was cut by ``max_output_tokens``, a budget or a deadline), each with its ``sequence_number``.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Literal

from pydantic import Field, model_validator

from paragen.serve import render
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
    text: dict[str, Any] | None = None
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
        format_type = ((self.text or {}).get("format") or {}).get("type", "text")
        if format_type != "text":
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
    return f"resp_{uuid.uuid4().hex}"


class ResponsesWire:
    """The ``response`` object, or its stream of typed events (see the module docstring)."""

    def __init__(self, plan: Plan, request: ResponsesRequest) -> None:
        self.plan = plan
        self.request = request
        self.created = int(time.time())
        self.message_id = f"msg_{uuid.uuid4().hex}"
        self._sequence = 0
        self._streamed: list[str] = []

    # -- whole answers -------------------------------------------------------------------------------

    def answer(self, results: list[StrategyResult]) -> dict[str, Any]:
        [result] = results
        return self._response(result, render.answer_text(result))

    def _response(self, result: StrategyResult | None, text: str | None) -> dict[str, Any]:
        """The response object: in progress (no result yet), or finished with ``text``."""
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
        if result is None or text is None:
            return body
        cut = render.finish_reason(self.plan, result) == "length"
        body["status"] = "incomplete" if cut else "completed"
        if cut:
            body["incomplete_details"] = {"reason": "max_output_tokens"}
        body["output"] = [self._message(text, "incomplete" if cut else "completed")]
        body["usage"] = usage([result])
        body["paragen"] = render.choice_extension(self.plan, result, self.request.paragen.include_result)
        return body

    def _message(self, text: str, status: str) -> dict[str, Any]:
        content = [_output_text(text)]
        return {
            "type": "message",
            "id": self.message_id,
            "status": status,
            "role": "assistant",
            "content": content,
        }

    # -- streamed -------------------------------------------------------------------------------------

    def opening(self) -> list[bytes]:
        in_progress = self._response(None, None)
        item = {**self._message("", "in_progress"), "content": []}
        return [
            self._event("response.created", response=in_progress),
            self._event("response.in_progress", response=in_progress),
            self._event("response.output_item.added", output_index=0, item=item),
            self._event("response.content_part.added", **self._part(), part=_output_text("")),
        ]

    def text(self, index: int, text: str) -> bytes:
        self._streamed.append(text)
        return self._event("response.output_text.delta", **self._part(), delta=text, logprobs=[])

    def reasoning(self, index: int, text: str) -> bytes | None:
        """None: the thinking is not sent as Responses API reasoning items (its tokens are counted
        in ``output_tokens_details.reasoning_tokens``)."""
        return None

    def closing(self, results: list[StrategyResult]) -> list[bytes]:
        [result] = results
        frames = []
        if self.plan.strategy_name is not None:  # a pass-through's text has streamed already
            frames.append(self.text(0, render.answer_text(result)))
        text = "".join(self._streamed)
        final = self._response(result, text)
        frames += [
            self._event("response.output_text.done", **self._part(), text=text, logprobs=[]),
            self._event("response.content_part.done", **self._part(), part=_output_text(text)),
            self._event("response.output_item.done", output_index=0, item=final["output"][0]),
            self._event(f"response.{final['status']}", response=final),
        ]
        return frames

    def failure(self, error: APIError) -> bytes:
        detail = error.body()["error"]
        return self._event("error", code=detail["code"], message=detail["message"], param=detail["param"])

    def _part(self) -> dict[str, Any]:
        return {"item_id": self.message_id, "output_index": 0, "content_index": 0}

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        return b"event: " + kind.encode() + b"\r\n" + render.sse_data(text)


def usage(results: list[StrategyResult]) -> dict[str, Any]:
    """The Responses API's usage: chat's counts under its names, with ``paragen`` beside them."""
    chat = render.usage(results)
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
