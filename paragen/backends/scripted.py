"""A deterministic backend driven by a function or a table of scripts.

Shipped and registered like any other backend ("scripted"), for timing-controlled
tests, fault injection and model-free demos. Each choice follows a :class:`Script`:
its text is cut into word tokens emitted with fixed delays, and it may fail in a
chosen way (an HTTP status before the first token, a reset or a malformed chunk
after some tokens, a timeout). Every stream is logged in ``streams`` with when it
was opened and closed, so tests can measure cancel-to-release latency. Every token is a
checkpoint unless the backend is built with ``coalesce=True`` (benchmarks: tokens already due
arrive together, as one read of an HTTP stream); with ``precise=True`` they arrive when due, not
when the event loop's timer next fires (see :func:`paragen._timing.sleep_until`).
"""

from __future__ import annotations

import heapq
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
from pydantic import Field

from paragen._timing import sleep_until
from paragen.backends.base import Capabilities, CompletionStream, estimate_tokens
from paragen.errors import (
    BackendConnectionError,
    BackendHTTPError,
    BackendProtocolError,
    BackendTimeoutError,
    ConfigError,
)
from paragen.types import Delta, FinishReason, GenerateRequest, Model, Usage

Failure = Literal["http500", "http429", "reset", "timeout", "malformed"]
_TOKEN = re.compile(r"\s*\S+|\s+")


class Script(Model):
    """What one choice produces: ``text`` as word tokens, ``token_delay`` seconds apart."""

    text: str
    token_delay: float = Field(default=0.0, ge=0)
    first_delay: float = Field(default=0.0, ge=0)
    finish_reason: FinishReason = "stop"
    fail: Failure | None = None
    fail_after: int = Field(default=0, ge=0)  # tokens sent before a reset / malformed chunk
    # Function calls sent after the text, one piece each (OpenAI's format, with "function": {...});
    # the choice then finishes with "tool_calls".
    tool_calls: list[dict[str, Any]] | None = None


Responder = Callable[[GenerateRequest, int], "Script | str"]
"""Called once per choice with the request and the choice's index."""


def tokenize(text: str) -> list[str]:
    """Word-level tokens (each keeps its leading space), so a script's token count is obvious."""
    return _TOKEN.findall(text)


@dataclass(slots=True)
class StreamRecord:
    """One stream as the backend saw it (monotonic times, ``time.perf_counter`` based)."""

    request: GenerateRequest
    opened: float
    closed: float | None = None
    tokens_sent: int = 0
    aborted: list[int] = field(default_factory=list)


class ScriptedBackend:
    """Deterministic backend; see the module docstring."""

    name = "scripted"

    def __init__(
        self,
        responder: Responder | Sequence[Script | str] | None = None,
        *,
        capabilities: Capabilities | None = None,
        coalesce: bool = False,
        precise: bool = False,
    ) -> None:
        self._responder = _as_responder(responder)
        # With ``coalesce``, tokens already due are handed over without a trip through the event
        # loop each, as an HTTP stream hands over every token that arrived in one read; without it
        # every token is a checkpoint, which the tests that interleave streams token by token need.
        self._coalesce = coalesce
        self._precise = precise
        self._capabilities = capabilities or Capabilities(
            logprobs=True, continue_final=True, tokenizer=True, tools=True
        )
        self.streams: list[StreamRecord] = []
        self.calls = 0

    @classmethod
    def from_spec(cls, target: str | None = None, **options: Any) -> ScriptedBackend:
        """``scripted`` (a built-in arithmetic responder) or ``scripted:FILE.jsonl`` (one Script per line)."""
        if options:
            raise ConfigError(f"the scripted backend takes no options, got {sorted(options)}")
        if target is None:
            return cls(arithmetic_responder)
        path = Path(target)
        if not path.is_file():
            raise ConfigError(
                f"scripted backend: no script file at {target!r}", hint="give a JSONL of scripts"
            )
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
        return cls([Script.model_validate(json.loads(ln)) for ln in lines])

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    async def count_tokens(self, text: str) -> tuple[int, str]:
        return len(tokenize(text)), "tokenizer"

    async def aclose(self) -> None:
        return None

    @asynccontextmanager
    async def stream(self, request: GenerateRequest) -> AsyncIterator[CompletionStream]:
        if request.n > 1 and not self._capabilities.native_n:
            raise ConfigError("the scripted backend was built without native n > 1")
        scripts = [self._script(request, i) for i in range(request.n)]
        record = StreamRecord(request=request, opened=_clock())
        self.streams.append(record)
        try:
            yield _ScriptedStream(request, scripts, record, coalesce=self._coalesce, precise=self._precise)
        finally:
            record.closed = _clock()

    def _script(self, request: GenerateRequest, index: int) -> Script:
        self.calls += 1
        script = self._responder(request, index)
        return Script(text=script) if isinstance(script, str) else script


class _ScriptedStream:
    def __init__(
        self,
        request: GenerateRequest,
        scripts: list[Script],
        record: StreamRecord,
        *,
        coalesce: bool,
        precise: bool,
    ) -> None:
        prompt = request.prompt or "".join(m.content for m in request.messages or ())
        # Usage covers the whole request: the prompt counts once per choice, all but one from cache.
        n, size = len(scripts), len(tokenize(prompt))
        cached = (n - 1) * size if n > 1 else None
        self.usage = Usage(prompt_tokens=n * size, cached_prompt_tokens=cached, source="tokenizer")
        self._scripts = scripts
        self._max_tokens = request.params.max_tokens
        self._stops = request.params.stop
        self._logprobs = request.params.logprobs
        self._record = record
        self._aborted: set[int] = set()
        self._coalesce = coalesce
        self._precise = precise

    async def abort(self, index: int) -> None:
        self._aborted.add(index)
        self._record.aborted.append(index)

    def __aiter__(self) -> AsyncIterator[Delta]:
        return self._deltas()

    async def _deltas(self) -> AsyncIterator[Delta]:
        for script in self._scripts:
            if script.fail in ("http500", "http429"):
                await anyio.sleep(script.first_delay)
                code = 500 if script.fail == "http500" else 429
                raise BackendHTTPError(f"scripted HTTP {code}", status_code=code)
        start = _clock()
        for when, index, position, token, finish in self._schedule():
            if index in self._aborted:
                continue
            if not self._coalesce or start + when > _clock():
                await sleep_until(start + when, precise=self._precise)
            if index in self._aborted:
                continue
            self._fail_if_due(self._scripts[index], position)
            self._record.tokens_sent += 1
            self.usage.completion_tokens += 1
            logprobs = (-0.1 * (1 + position % 3),) if self._logprobs else None
            calls = self._scripts[index].tool_calls if finish not in (None, "length") else None
            yield Delta(index, token, 1, logprobs=logprobs, finish_reason=None if calls else finish)
            if calls:
                pieces = tuple({"index": i, **call} for i, call in enumerate(calls))
                yield Delta(index, "", 0, tool_calls=pieces, finish_reason="tool_calls")
            if finish is not None:
                self._aborted.add(index)  # finished: nothing more from this choice

    def _schedule(self) -> Iterator[tuple[float, int, int, str, FinishReason | None]]:
        """Every choice's tokens in time order, produced lazily (a stream may be left after a few)."""
        return heapq.merge(
            *(self._timeline(i, s) for i, s in enumerate(self._scripts)), key=lambda e: (e[0], e[1])
        )

    def _timeline(
        self, index: int, script: Script
    ) -> Iterator[tuple[float, int, int, str, FinishReason | None]]:
        tokens, finish = self._cut(script)
        last = len(tokens) - 1
        for pos, token in enumerate(tokens):
            yield (
                script.first_delay + pos * script.token_delay,
                index,
                pos,
                token,
                finish if pos == last else None,
            )

    def _cut(self, script: Script) -> tuple[list[str], FinishReason]:
        text, finish = script.text, script.finish_reason
        for stop in self._stops:
            if stop in text:
                text, finish = text[: text.index(stop)], "stop"
        tokens = tokenize(text) or [""]
        if len(tokens) > self._max_tokens:
            return tokens[: self._max_tokens], "length"
        return tokens, finish

    @staticmethod
    def _fail_if_due(script: Script, position: int) -> None:
        if script.fail is None or position < script.fail_after:
            return
        if script.fail == "reset":
            raise BackendConnectionError("scripted connection reset mid-stream")
        if script.fail == "malformed":
            raise BackendProtocolError("scripted malformed chunk")
        if script.fail == "timeout":
            raise BackendTimeoutError("scripted read timeout")


def _clock() -> float:
    return time.perf_counter()


def _as_responder(responder: Responder | Sequence[Script | str] | None) -> Responder:
    if responder is None:
        return arithmetic_responder
    if callable(responder):
        return responder
    table = list(responder)
    if not table:
        raise ConfigError("a scripted backend needs at least one script")
    counter = iter(range(1 << 62))
    return lambda _request, _index: table[next(counter) % len(table)]


_ARITH = re.compile(r"(-?\d+)\s*([-+*x×])\s*(-?\d+)")


def arithmetic_responder(request: GenerateRequest, index: int) -> Script:
    """A model-free stand-in for demos: solves "a op b", wrong on some seeds, like a small model."""
    prompt = request.prompt or (request.messages[-1].content if request.messages else "")
    match = _ARITH.search(prompt)
    if match is None:
        return Script(text="I am not sure. The answer is \\boxed{0}.", token_delay=0.002)
    a, op, b = int(match[1]), match[2], int(match[3])
    value = a + b if op == "+" else a - b if op == "-" else a * b
    base = request.params.seed
    seed = base + index if base is not None else sum(map(int, re.findall(r"\d+", request.request_id)))
    wrong = seed % 4 == 3  # every fourth sample slips by one
    steps = " ".join(["Let me work this out carefully."] * (1 + seed % 3))
    answer = value + 1 if wrong else value
    return Script(
        text=f"{steps} {a} {op} {b} = {answer}. The answer is \\boxed{{{answer}}}.", token_delay=0.002
    )


__all__ = [
    "Script",
    "ScriptedBackend",
    "StreamRecord",
    "arithmetic_responder",
    "estimate_tokens",
    "tokenize",
]
