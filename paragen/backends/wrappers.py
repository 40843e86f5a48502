"""Backends that wrap a backend, composed like httpx transports.

    backend = ConcurrencyLimit(Record(OpenAIBackend.from_spec(url), "run.jsonl"), 64)

Each wrapper is itself a :class:`~paragen.backends.base.Backend`, so they stack in any
order and the code above them cannot tell. :class:`Replay` is a backend on its own: it
plays recorded streams back, so a run can be re-graded or debugged without a model.

There is no retry wrapper: retrying is the HTTP backend's job (the only backend whose
failures are transient), where it can also move to another replica, honour Retry-After
and know that no delta has been handed out yet. One layer, so retries never multiply.

The stream contexts here are small classes, not ``@asynccontextmanager`` generators:
a wrapped stream may hold a task group, and only a real ``__aenter__``/``__aexit__``
pair keeps its cancel scope entered and left in the caller's own frame.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from abc import ABC, abstractmethod
from collections import defaultdict, deque
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio

from paragen import errors
from paragen.backends.base import Backend, Capabilities, CompletionStream, estimate_tokens, open_backend
from paragen.errors import BackendError, ConfigError
from paragen.types import Delta, GenerateRequest, Usage

# Capabilities that recordings made by earlier versions carry and that no strategy ever read:
# replay drops them, so those recordings still load under Capabilities' extra="forbid".
RETIRED_CAPABILITIES = frozenset({"prompt_cache_reporting", "tokenizer"})

_ExitArgs = tuple[type[BaseException] | None, BaseException | None, TracebackType | None]


class WrapperBackend:
    """A backend that hands everything to ``inner``; subclasses override what they change."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name = inner.name

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    def stream(self, request: GenerateRequest) -> AbstractAsyncContextManager[CompletionStream]:
        return self.inner.stream(request)

    async def count_tokens(self, text: str) -> tuple[int, str]:
        return await self.inner.count_tokens(text)

    async def open(self) -> None:
        await open_backend(self.inner)

    async def aclose(self) -> None:
        await self.inner.aclose()


class _StreamContext(ABC):
    """Base of the wrappers' stream contexts: an exit stack entered and left by the caller.

    Subclasses open their stream in ``_enter``. When that raises, the caller never calls
    ``__aexit__``, so what ``_enter`` put on the stack (a limiter slot, the inner stream) is
    given back here, before the error propagates.
    """

    def __init__(self) -> None:
        self._stack = AsyncExitStack()

    @abstractmethod
    async def _enter(self) -> CompletionStream:
        """Open the stream, putting what must be given back on ``self._stack``."""

    async def __aenter__(self) -> CompletionStream:
        try:
            return await self._enter()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._stack.aclose()
            raise

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return await self._stack.__aexit__(*exc_info)


# --- ConcurrencyLimit ----------------------------------------------------------------------


class ConcurrencyLimit(WrapperBackend):
    """At most ``limit`` streams open at once; others wait (in FIFO order) to start.

    A slot is held from entering the stream to leaving it, whatever its ``n``.
    """

    def __init__(self, inner: Backend, limit: int) -> None:
        if limit < 1:
            raise ConfigError(f"concurrency limit must be at least 1, got {limit}")
        super().__init__(inner)
        self.limiter = anyio.CapacityLimiter(limit)

    def stream(self, request: GenerateRequest) -> AbstractAsyncContextManager[CompletionStream]:
        return _LimitedContext(self, request)


class _LimitedContext(_StreamContext):
    def __init__(self, owner: ConcurrencyLimit, request: GenerateRequest) -> None:
        super().__init__()
        self._owner, self._request = owner, request

    async def _enter(self) -> CompletionStream:
        limiter = self._owner.limiter
        # One borrower per stream: a task may hold several streams, and a limiter
        # gives each borrower only one token.
        borrower = object()
        await limiter.acquire_on_behalf_of(borrower)
        self._stack.callback(limiter.release_on_behalf_of, borrower)
        return await self._stack.enter_async_context(self._owner.inner.stream(self._request))


# --- Record / Replay -----------------------------------------------------------------------


def request_key(request: GenerateRequest) -> str:
    """What identifies a request's content: everything but its id and routing hints."""
    content = request.model_dump(mode="json", exclude={"request_id", "affinity", "hedge_after_s"})
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:32]


class Record(WrapperBackend):
    """Append every stream to a JSONL file: the request, every delta, the final usage.

    One line per stream, written when the stream is left (early exits and errors
    included, marked by ``complete`` and ``error``), for :class:`Replay` to play back.
    """

    def __init__(self, inner: Backend, path: str | Path) -> None:
        super().__init__(inner)
        self.path = Path(path)
        self._lock = anyio.Lock()

    def stream(self, request: GenerateRequest) -> AbstractAsyncContextManager[CompletionStream]:
        return _RecordContext(self, request)

    async def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False) + "\n"
        async with self._lock, await anyio.open_file(self.path, "a", encoding="utf-8") as file:
            await file.write(line)


class _RecordContext(_StreamContext):
    def __init__(self, owner: Record, request: GenerateRequest) -> None:
        super().__init__()
        self._owner, self._request = owner, request
        self._deltas: list[Delta] = []
        self._inner: CompletionStream | None = None
        self._complete = False

    async def _enter(self) -> CompletionStream:
        self._inner = await self._stack.enter_async_context(self._owner.inner.stream(self._request))
        tap = _Tap(self._inner, self)
        self._stack.push_async_callback(tap.aclose)  # closed before the inner stream
        return tap

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        try:
            return await self._stack.__aexit__(*exc_info)
        finally:
            with anyio.CancelScope(shield=True):
                await self._owner.write(self._record(exc_info[1]))

    def _record(self, exc: BaseException | None) -> dict[str, Any]:
        error = None
        if isinstance(exc, BackendError):
            error = {
                "type": type(exc).__name__,
                "message": exc.message,
                "status_code": getattr(exc, "status_code", None),
            }
        return {
            "key": request_key(self._request),
            "request": self._request.model_dump(mode="json"),
            "capabilities": self._owner.capabilities.model_dump(),
            "deltas": [dataclasses.asdict(d) for d in self._deltas],
            "usage": self._inner.usage.model_dump() if self._inner else None,
            "complete": self._complete and exc is None,
            "error": error,
        }


class _Tap:
    """The inner stream, seen through a recorder."""

    def __init__(self, inner: CompletionStream, recorder: _RecordContext) -> None:
        self.usage = inner.usage
        self._inner, self._recorder = inner, recorder
        self._iterators: list[AsyncGenerator[Delta, None]] = []

    def __aiter__(self) -> AsyncIterator[Delta]:
        return _track(self._iterators, self._iterate())

    async def abort(self, index: int) -> None:
        await self._inner.abort(index)

    async def aclose(self) -> None:
        await _close_all(self._iterators)

    async def _iterate(self) -> AsyncGenerator[Delta, None]:
        async for delta in self._inner:
            self._recorder._deltas.append(delta)
            yield delta
        self._recorder._complete = True


class Replay:
    """Plays back streams recorded by :class:`Record`, matched by request content.

    Identical requests (n samples sent as n equal requests) get their recordings in
    the order they were recorded; asking for more than were recorded is an error.
    """

    name = "replay"

    def __init__(self, path: str | Path, *, capabilities: Capabilities | None = None) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise ConfigError(
                f"no recording at {self.path}", hint="record a run first with the Record wrapper"
            )
        self._records: defaultdict[str, deque[dict[str, Any]]] = defaultdict(deque)
        first_capabilities = None
        for line in self.path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                self._records[record["key"]].append(record)
                first_capabilities = first_capabilities or record.get("capabilities")
        recorded = {k: v for k, v in (first_capabilities or {}).items() if k not in RETIRED_CAPABILITIES}
        self._capabilities = capabilities or Capabilities.model_validate(recorded)

    @classmethod
    def from_spec(cls, target: str | None, **options: Any) -> Replay:
        """``replay:FILE.jsonl``."""
        if not target or options:
            raise ConfigError("replay takes a file and no options", hint="e.g. replay:run.jsonl")
        return cls(target)

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    def stream(self, request: GenerateRequest) -> AbstractAsyncContextManager[CompletionStream]:
        return _ReplayContext(self._take(request))

    def _take(self, request: GenerateRequest) -> dict[str, Any] | None:
        queue = self._records.get(request_key(request))
        return queue.popleft() if queue else None

    async def count_tokens(self, text: str) -> tuple[int, str]:
        return estimate_tokens(text), "estimate"

    async def aclose(self) -> None:
        return None


class _ReplayContext:
    def __init__(self, record: dict[str, Any] | None) -> None:
        self._record = record
        self._stream: _ReplayStream | None = None

    async def __aenter__(self) -> CompletionStream:
        if self._record is None:
            raise BackendError("replay: no (more) recordings of this request")
        self._stream = _ReplayStream(self._record)
        return self._stream

    async def __aexit__(self, *exc_info: Any) -> None:
        if self._stream is not None:
            await self._stream.aclose()


class _ReplayStream:
    def __init__(self, record: dict[str, Any]) -> None:
        self._record = record
        self._final = Usage.model_validate(record["usage"] or {})
        self.usage = Usage(prompt_tokens=self._final.prompt_tokens, source=self._final.source)
        self._aborted: set[int] = set()
        self._iterators: list[AsyncGenerator[Delta, None]] = []

    def __aiter__(self) -> AsyncIterator[Delta]:
        return _track(self._iterators, self._iterate())

    async def abort(self, index: int) -> None:
        self._aborted.add(index)

    async def aclose(self) -> None:
        await _close_all(self._iterators)

    async def _iterate(self) -> AsyncGenerator[Delta, None]:
        for raw in self._record["deltas"]:
            delta = _delta(raw)
            if delta.index in self._aborted:
                continue
            self.usage.completion_tokens += delta.num_tokens
            yield delta
            await anyio.lowlevel.checkpoint()
        for name in Usage.model_fields:
            setattr(self.usage, name, getattr(self._final, name))
        if self._record.get("error"):
            raise _error(self._record["error"])


def _track(
    iterators: list[AsyncGenerator[Delta, None]], deltas: AsyncGenerator[Delta, None]
) -> AsyncGenerator[Delta, None]:
    """``deltas``, kept so that leaving the stream closes it (left early, a generator is closed by
    the garbage collector, which trio reports as a ResourceWarning)."""
    iterators.append(deltas)
    return deltas


async def _close_all(iterators: list[AsyncGenerator[Delta, None]]) -> None:
    for deltas in iterators:
        await deltas.aclose()


def _delta(raw: dict[str, Any]) -> Delta:
    tops = raw["top_logprobs"]
    return Delta(
        index=raw["index"],
        text=raw["text"],
        num_tokens=raw["num_tokens"],
        token_ids=None if raw["token_ids"] is None else tuple(raw["token_ids"]),
        logprobs=None if raw["logprobs"] is None else tuple(raw["logprobs"]),
        top_logprobs=None if tops is None else tuple(tuple(t) for t in tops),
        finish_reason=raw["finish_reason"],
    )


def _error(raw: dict[str, Any]) -> BackendError:
    cls = getattr(errors, raw["type"], BackendError)
    if isinstance(cls, type) and issubclass(cls, errors.BackendHTTPError):
        return cls(raw["message"], status_code=raw.get("status_code") or 500)
    if isinstance(cls, type) and issubclass(cls, BackendError):
        return cls(raw["message"])
    return BackendError(raw["message"])
