"""Replies in the OpenAI wire format (chat completions, and what the Responses API shares), with
paragen's extensions beside the standard fields; :mod:`paragen.serve.wire` reads the requests.

Extensions (documented in docs/serve.md), all ignored by clients that do not know them:

- ``usage.paragen``: sequential, wasted and judge tokens, sample counts, latency, time to
  first token and how the counts were obtained;
- ``choices[i].paragen``: the strategy's extracted answer, why the run stopped, a vote over
  tool calls' counts (``vote``), and with ``paragen.include_result`` the whole StrategyResult;
- streamed events: SSE comment lines ``: paragen {json}`` before the answer's chunks.
"""

from __future__ import annotations

import json
import time
from typing import Any

from paragen.serve.errors import APIError
from paragen.serve.routing import Plan
from paragen.serve.service import generated_tokens
from paragen.types import StrategyResult

EVENT_PREFIX = "paragen "

# One SSE event is "data: TEXT" (or ": TEXT", a comment) and a blank line, as sse-starlette writes it.
# Every text sent here is JSON (or [DONE]), which has no line break, so it is one line as it is.
SSE_END = b"\r\n\r\n"


def sse_data(text: str) -> bytes:
    return b"data: " + text.encode() + SSE_END


class ChatWire:
    """Chat and legacy completions answers: one JSON body, or OpenAI's chunks then ``[DONE]``."""

    def __init__(self, plan: Plan, *, include_result: bool = False, include_usage: bool = False) -> None:
        self.plan = plan
        self.created = int(time.time())
        self.include_result = include_result
        self.include_usage = include_usage
        self._content: list[ContentChunks] | None = None

    def answer(self, results: list[StrategyResult]) -> dict[str, Any]:
        return completion(self.plan, results, self.created, self.include_result)

    def opening(self) -> list[bytes]:
        plan, created = self.plan, self.created
        self._content = [ContentChunks(plan, created, i) for i in range(plan.choices)]
        return [sse_data(chunk(plan, created, i, role=True)) for i in range(plan.choices)]

    def text(self, index: int, text: str) -> bytes:
        assert self._content is not None, "opening() first"
        return sse_data(self._content[index](text))

    def reasoning(self, index: int, text: str) -> bytes | None:
        """Thinking as chat clients read it (``reasoning``, and ``reasoning_content`` for the clients
        that still read that); a completion has no place for it."""
        if self.plan.messages is None:
            return None
        return sse_data(chunk(self.plan, self.created, index, reasoning=text))

    def closing(self, results: list[StrategyResult]) -> list[bytes]:
        plan, created = self.plan, self.created
        frames: list[str] = []
        for index, result in enumerate(results):
            text = answer_text(result)
            if plan.strategy_name is not None and result.reasoning and plan.messages is not None:
                frames.append(chunk(plan, created, index, reasoning=result.reasoning))
            if plan.strategy_name is not None and (text or not result.tool_calls):
                frames.append(chunk(plan, created, index, text=text))  # a pass-through's has streamed
            if result.tool_calls:
                frames.append(chunk(plan, created, index, tool_calls=stream_tool_calls(result)))
            ext = choice_extension(plan, result, self.include_result)
            frames.append(chunk(plan, created, index, finish=finish_reason(plan, result), extension=ext))
        if self.include_usage:
            frames.append(usage_chunk(plan, created, results))
        frames.append("[DONE]")
        return [sse_data(frame) for frame in frames]

    def failure(self, error: APIError) -> bytes:
        return sse_data(json.dumps(error.body()))


def usage(results: list[StrategyResult]) -> dict[str, Any]:
    """OpenAI usage over every run of the request, ``completion_tokens`` being all generated tokens."""
    prompt = sum(r.usage.prompt_tokens for r in results)
    completion = sum(generated_tokens(r) for r in results)
    body: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion}
    body["total_tokens"] = prompt + completion
    # The samples' thinking tokens (of completion_tokens), as vLLM and OpenAI report them.
    body["completion_tokens_details"] = {"reasoning_tokens": sum(r.usage.reasoning_tokens for r in results)}
    cached = [r.usage.cached_prompt_tokens for r in results if r.usage.cached_prompt_tokens is not None]
    if cached:
        body["prompt_tokens_details"] = {"cached_tokens": sum(cached)}
    first_tokens = [r.usage.ttft_s for r in results if r.usage.ttft_s is not None]
    body["paragen"] = {
        "sequential_tokens": max(r.usage.sequential_tokens for r in results),
        "wasted_tokens": sum(r.usage.wasted_tokens for r in results),
        "judge_tokens": sum(r.usage.judge_tokens for r in results),
        "num_samples": sum(r.usage.num_samples for r in results),
        "num_cancelled": sum(r.usage.num_cancelled for r in results),
        "num_errors": sum(r.usage.num_errors for r in results),
        "latency_s": round(max(r.usage.latency_s for r in results), 6),
        "ttft_s": round(min(first_tokens), 6) if first_tokens else None,
        "count_sources": sorted({s for r in results for s in r.usage.count_sources}),
        "answer_tokens": sum(r.usage.answer_tokens for r in results),
        "num_open_thinking": sum(r.usage.num_open_thinking for r in results),
    }
    return body


def answer_text(result: StrategyResult) -> str:
    """What the client reads as the reply: the strategy's final text, else its bare answer
    (not for a reply of tool calls: their text, if any, is all)."""
    if result.text is not None:
        return result.text
    return "" if result.tool_calls else result.answer or ""


def message(result: StrategyResult) -> dict[str, Any]:
    """The assistant message of a chat answer: its text, or its tool calls (content null if none),
    and its thinking where it had some."""
    text = answer_text(result)
    body: dict[str, Any] = {"role": "assistant", "content": text}
    if result.tool_calls:
        body = {"role": "assistant", "content": text or None, "tool_calls": result.tool_calls}
    if result.reasoning:
        body.update(_thinking(result.reasoning))
    return body


def _thinking(text: str) -> dict[str, str]:
    return {"reasoning": text, "reasoning_content": text}


def stream_tool_calls(result: StrategyResult) -> list[dict[str, Any]]:
    """The reply's tool calls as one streamed delta carries them (each whole, with its index)."""
    return [{"index": i, **call} for i, call in enumerate(result.tool_calls or ())]


def finish_reason(plan: Plan, result: StrategyResult) -> str:
    if result.tool_calls and result.stop_reason == "done":
        return "tool_calls"
    if result.stop_reason in ("deadline", "budget"):
        return "length"
    if plan.strategy_name is None and result.traces and result.traces[0].finish_reason == "length":
        return "length"
    return "stop"


def choice_extension(plan: Plan, result: StrategyResult, include_result: bool) -> dict[str, Any]:
    ext: dict[str, Any] = {
        "strategy": result.strategy,
        "answer": result.answer,
        "stop_reason": result.stop_reason,
    }
    if "tool_vote" in result.details:
        ext["vote"] = result.details["tool_vote"]
    if include_result:
        ext["result"] = result.model_dump(mode="json")
    return ext


def completion(
    plan: Plan, results: list[StrategyResult], created: int, include_result: bool
) -> dict[str, Any]:
    """The whole (non-streamed) answer."""
    chat = plan.messages is not None
    choices = []
    for index, result in enumerate(results):
        choice: dict[str, Any] = {"index": index, "finish_reason": finish_reason(plan, result)}
        if chat:
            choice["message"] = message(result)
        else:
            choice["text"] = answer_text(result)
        choice["logprobs"] = None
        choice["paragen"] = choice_extension(plan, result, include_result)
        choices.append(choice)
    return {
        **_head(plan, created, "chat.completion" if chat else "text_completion"),
        "choices": choices,
        "usage": usage(results),
    }


def chunk(
    plan: Plan,
    created: int,
    index: int,
    *,
    text: str | None = None,
    role: bool = False,
    finish: str | None = None,
    extension: dict[str, Any] | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    reasoning: str | None = None,
) -> str:
    """One streamed chunk as JSON text."""
    chat = plan.messages is not None
    choice: dict[str, Any] = {"index": index}
    if chat:
        delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
        if text is not None:
            delta["content"] = text
        if tool_calls:
            delta["tool_calls"] = tool_calls
        if reasoning:
            delta.update(_thinking(reasoning))
        choice["delta"] = delta
    else:
        choice["text"] = text or ""
    choice["logprobs"] = None
    choice["finish_reason"] = finish
    if extension is not None:
        choice["paragen"] = extension
    body = {
        **_head(plan, created, "chat.completion.chunk" if chat else "text_completion"),
        "choices": [choice],
    }
    return _dumps(body)


class ContentChunks:
    """Content chunks of one choice, rendered fast: the JSON around the text is made once, so a
    streamed token costs one ``json.dumps`` of its text (the same bytes ``chunk`` gives)."""

    _MARK = "\x00"  # a character JSON always escapes, so it cannot clash with the head

    def __init__(self, plan: Plan, created: int, index: int) -> None:
        whole = chunk(plan, created, index, text=self._MARK)
        self._head, _, self._tail = whole.rpartition(json.dumps(self._MARK))

    def __call__(self, text: str) -> str:
        return self._head + json.dumps(text, ensure_ascii=False) + self._tail


def usage_chunk(plan: Plan, created: int, results: list[StrategyResult]) -> str:
    chat = plan.messages is not None
    head = _head(plan, created, "chat.completion.chunk" if chat else "text_completion")
    return _dumps({**head, "choices": [], "usage": usage(results)})


def event_comment(index: int, event: Any) -> str | None:
    """A live event as the text of an SSE comment (``paragen {json}``); None for events not sent."""
    dump = getattr(event, "model_dump", None)
    if dump is None:
        return None
    data: dict[str, Any] = dump(mode="json")
    if data.get("type") == "run_ended":  # the answer itself follows as chunks
        return None
    data.pop("problem_id", None)
    trace = data.get("trace")
    if isinstance(trace, dict):  # per-token numbers are for include_result, not the live feed
        trace.pop("logprobs", None)
        trace.pop("top_logprobs", None)
    data["index"] = index
    return EVENT_PREFIX + _dumps(data)


def _head(plan: Plan, created: int, obj: str) -> dict[str, Any]:
    return {"id": plan.id, "object": obj, "created": created, "model": plan.model}


def _dumps(body: dict[str, Any]) -> str:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))
