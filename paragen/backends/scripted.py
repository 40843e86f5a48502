"""A deterministic backend driven by a function or a table of scripts.

Shipped and registered like any other backend ("scripted"), for timing-controlled
tests, fault injection and model-free demos. Each choice follows a :class:`Script`:
its text is cut into word tokens emitted with fixed delays, and it may fail in a
chosen way (an HTTP status before the first token, a reset or a malformed chunk
after some tokens, a timeout). The latest streams (``keep_streams`` of them) are logged in
``streams`` with when each was opened and closed, so tests can measure cancel-to-release latency;
``num_streams`` counts them all (a long-lived server on this backend keeps a bounded log). Every token is a
checkpoint unless the backend is built with ``coalesce=True`` (benchmarks: tokens already due
arrive together, as one read of an HTTP stream); with ``precise=True`` they arrive when due, not
when the event loop's timer next fires (see :func:`paragen._timing.sleep_until`). A table of
scripts is handed out in call order, or with ``order="fanout"`` by each fan-out's choice (see
:class:`FanoutOrder`), which does not depend on the order the event loop starts tasks in.
"""

from __future__ import annotations

import heapq
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
from pydantic import Field, ValidationError

from paragen._timing import sleep_until
from paragen.backends.base import Capabilities, CompletionStream, estimate_tokens
from paragen.errors import (
    BackendConnectionError,
    BackendHTTPError,
    BackendProtocolError,
    BackendTimeoutError,
    ConfigError,
    describe_invalid,
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
    # Thinking sent apart before the text, as a server with a reasoning parser sends it
    # (Delta.reasoning), as word tokens like the text.
    reasoning: str = ""


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
    """Scripted replies with fixed delays and chosen faults, for tests and model-free demos; no model."""

    name = "scripted"

    def __init__(
        self,
        responder: Responder | Sequence[Script | str] | None = None,
        *,
        capabilities: Capabilities | None = None,
        coalesce: bool = False,
        precise: bool = False,
        order: Literal["call", "fanout"] = "call",
        keep_streams: int = 1024,
    ) -> None:
        if keep_streams < 0:
            raise ConfigError(f"keep_streams must be 0 or more, got {keep_streams}")
        self._responder = _as_responder(responder, order)
        # With ``coalesce``, tokens already due are handed over without a trip through the event
        # loop each, as an HTTP stream hands over every token that arrived in one read; without it
        # every token is a checkpoint, which the tests that interleave streams token by token need.
        self._coalesce = coalesce
        self._precise = precise
        self._capabilities = capabilities or Capabilities(logprobs=True, continue_final=True, tools=True)
        self.streams: list[StreamRecord] = []  # the latest keep_streams, oldest first
        self.num_streams = 0
        self.calls = 0
        self._keep_streams = keep_streams

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
        return cls(read_scripts(path))

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
        self._log(record)
        stream = _ScriptedStream(request, scripts, record, coalesce=self._coalesce, precise=self._precise)
        try:
            yield stream
        finally:
            await stream.aclose()
            record.closed = _clock()

    def _log(self, record: StreamRecord) -> None:
        self.num_streams += 1
        self.streams.append(record)
        if len(self.streams) > self._keep_streams:
            del self.streams[0]

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
        self._iterators: list[AsyncGenerator[Delta, None]] = []
        # A choice's first tokens think: its reasoning's, cut at the request's thinking budget (as a
        # server that enforces one ends the thinking there).
        budget = request.thinking_budget
        self._num_thinking = [self._thinking_tokens(s, budget) for s in scripts]

    async def abort(self, index: int) -> None:
        self._aborted.add(index)
        self._record.aborted.append(index)

    def __aiter__(self) -> AsyncIterator[Delta]:
        deltas = self._deltas()
        self._iterators.append(deltas)
        return deltas

    async def aclose(self) -> None:
        """Close what iterated it (left early, a generator would be closed by the garbage
        collector, which trio reports as a ResourceWarning)."""
        for deltas in self._iterators:
            await deltas.aclose()

    async def _deltas(self) -> AsyncGenerator[Delta, None]:
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
            script = self._scripts[index]
            calls = script.tool_calls if finish not in (None, "length") else None
            thinking = position < self._num_thinking[index]
            yield Delta(
                index,
                "" if thinking else token,
                1,
                logprobs=logprobs,
                finish_reason=None if calls else finish,
                reasoning=token if thinking else "",
            )
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
        tokens, finish = self._cut(index, script)
        last = len(tokens) - 1
        for pos, token in enumerate(tokens):
            yield (
                script.first_delay + pos * script.token_delay,
                index,
                pos,
                token,
                finish if pos == last else None,
            )

    def _cut(self, index: int, script: Script) -> tuple[list[str], FinishReason]:
        text, finish = script.text, script.finish_reason
        for stop in self._stops:
            if stop in text:
                text, finish = text[: text.index(stop)], "stop"
        thinking = tokenize(script.reasoning)[: self._num_thinking[index]]
        tokens = thinking + (tokenize(text) or ([] if thinking else [""]))
        if len(tokens) > self._max_tokens:
            return tokens[: self._max_tokens], "length"
        return tokens, finish

    @staticmethod
    def _thinking_tokens(script: Script, budget: int | None) -> int:
        count = len(tokenize(script.reasoning))
        return count if budget is None else min(count, budget)

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


def read_scripts(path: Path) -> list[Script]:
    """The scripts of a JSONL file, one per non-blank line; a ConfigError naming the first bad line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"scripted backend: cannot read {path}: {exc}") from exc
    scripts = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            scripts.append(Script.model_validate_json(line))
        except ValidationError as exc:
            raise ConfigError(
                f"scripted backend: {path} line {number}: {describe_invalid(exc, every=True)}",
                hint='one JSON object a line, e.g. {"text": "The answer is 4.", "token_delay": 0.01}',
            ) from exc
    return scripts


def _clock() -> float:
    return time.perf_counter()


def _as_responder(
    responder: Responder | Sequence[Script | str] | None, order: Literal["call", "fanout"]
) -> Responder:
    if responder is None or callable(responder):
        if order != "call":
            raise ConfigError("a scripted backend's order applies to a table of scripts")
        return arithmetic_responder if responder is None else responder
    table = list(responder)
    if not table:
        raise ConfigError("a scripted backend needs at least one script")
    if order == "fanout":
        return FanoutOrder(table)
    counter = iter(range(1 << 62))
    return lambda _request, _index: table[next(counter) % len(table)]


class FanoutOrder:
    """A table of scripts handed out fan-out by fan-out, and within one by choice (``order="fanout"``).

    The choices of one fan-out get the next scripts of the table by their index, whatever order
    their streams open in: an event loop may start tasks started together in any order (trio
    shuffles them on purpose), so call order says nothing about which sample asked. A fan-out's
    choices are the ``n`` of a native ``n > 1`` request, or the requests the fan-out split it
    into (ids ``"<id>-<i>"``, see :func:`paragen._fanout._single`); any other request is a fan-out
    of one. Fan-outs take their scripts in the order they first open, so they must not overlap:
    a choice opened after a later fan-out took the scripts after its own raises ConfigError.
    """

    def __init__(self, table: Sequence[Script | str]) -> None:
        self._table = list(table)
        self._starts: dict[str, int] = {}  # a fan-out's first script, in the order fan-outs opened
        self._next = 0  # the first script no fan-out has taken

    def __call__(self, request: GenerateRequest, index: int) -> Script | str:
        base, choice = fanout_choice(request, index)
        start = self._starts.get(base)
        if start is None:
            start = self._starts[base] = self._next
        position = start + choice
        later = [s for s in self._starts.values() if s > start]
        if later and position >= min(later):
            raise ConfigError(
                f"scripted backend: choice {choice} of {base!r} opened after a later fan-out took its script",
                hint='order="fanout" needs fan-outs that do not overlap; pass a responder instead',
            )
        self._next = max(self._next, position + 1)
        return self._table[position % len(self._table)]


def fanout_choice(request: GenerateRequest, index: int) -> tuple[str, int]:
    """Which fan-out a choice belongs to (the id of the request it came from) and its index there."""
    if request.n > 1:
        return request.request_id, index
    base, _, tail = request.request_id.rpartition("-")
    if tail.isdigit() and "-" in base:  # "pg-7-2": choice 2 of "pg-7", split off by the fan-out
        return base, int(tail)
    return request.request_id, 0


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
    "FanoutOrder",
    "Script",
    "ScriptedBackend",
    "StreamRecord",
    "arithmetic_responder",
    "estimate_tokens",
    "tokenize",
]
