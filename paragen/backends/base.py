"""The backend contract: one streaming method, used as an async context manager.

    async with backend.stream(request) as stream:
        async for delta in stream:
            ...

Leaving the ``async with`` block early (break, exception, cancellation) cancels the
request for real: the HTTP response is closed so the server aborts it, the engine
sequence is aborted and its cache freed. ``stream.abort(index)`` stops one choice
of an ``n > 1`` request while the others go on, where ``capabilities.per_choice_abort``
says the backend can; after it, no more deltas of that choice are delivered. A cancel that
stops several samples issues all its aborts before it awaits any (they run concurrently, on one
stream or on several) and every stream's scope is cancelled at once, so a backend sees them
together: the engine applies the aborts that arrive together at one step boundary, and an abort
should not wait for anything but its own choice's end.

``stream.usage`` is live: backends update it as they learn counts (prompt tokens as
soon as known, completion tokens as they stream), so budgets see tokens as they come.
It covers the whole request: for ``n`` choices the prompt counts ``n`` times, and
``cached_prompt_tokens`` says how many of those were served from a cache (the engine
prefills a shared prompt once, so n - 1 of the n copies are cached).

A backend may also have ``async open()``: the step that makes its ``capabilities`` true
(an HTTP backend probes its servers there). The Orchestrator calls it once, through
:func:`open_backend`, before any strategy reads the capabilities; it must be idempotent.
Configuration mistakes it finds (a base URL without ``/v1``) are raised there, once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from paragen._tool_calls import merge
from paragen.errors import ConfigError
from paragen.reasoning import ThinkFormat
from paragen.types import Completion, Delta, GenerateRequest, SamplingParams, Usage
from paragen.types import SharedRow as SharedRow
from paragen.types import SharedSample as SharedSample


class Capabilities(BaseModel):
    """What a backend can do; strategies and the context read this instead of guessing."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    native_n: bool = False  # one request may ask for n > 1 choices
    per_choice_abort: bool = False  # stream.abort(index) stops one choice of an n > 1 request
    logprobs: bool = False
    top_logprobs: int = 0  # how many alternatives per token it can return (0 = none)
    shared_cache: bool = False  # Hogwild!-style workers over one KV cache (engine only)
    raw_prompt: bool = True  # accepts a raw text prompt (completions), not only chat
    chat: bool = True  # accepts chat messages
    continue_final: bool = False  # can continue a prefilled assistant message
    tools: bool = False  # takes function calling (GenerateRequest.tools) and streams tool calls
    # fork(stream, index, num_tokens, suffix, request): a probe from a live KV cache; siblings(): an
    # opener whose requests start from the first one's cache where their prompts agree
    fork: bool = False
    # How the model marks its thinking in its text, split client-side where the server does not
    # send it apart (see paragen.reasoning); "none" keeps the whole text as the answer.
    thinking: ThinkFormat = "think"
    # Every request carries a server-side thinking budget (vLLM's thinking_token_budget): the
    # server ends the thinking itself, so strategies need not force it client-side.
    thinking_budget: bool = False
    # A gateway in front of the servers pins requests by this header (paragen.backends.routing):
    # every request of a problem carries the problem's routing key there, and its traces record it.
    routing_header: str | None = None


class Capacity(BaseModel):
    """How much a backend holds at once, where it knows (None: not known). A backend may have
    ``capacity()`` returning one; preflight (paragen.preflight) checks a strategy's n and
    max_tokens against it before anything is generated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    what: str = "the backend"  # how lines name it: "the engine", "the server"
    sequences: int | None = None  # samples decoded at once (the engine's batch slots)
    tokens: int | None = None  # cached tokens in all (the engine's KV blocks x block size)
    sequence_tokens: int | None = None  # prompt and reply of one sample (a context length)
    hard_context: bool = False  # a request past sequence_tokens is refused (vLLM), not cut

    def refusals(self, n: int, prompt: int, max_tokens: int) -> list[str]:
        """Why ``n`` samples of a ``prompt``-token prompt cannot run at all (empty: they can)."""
        ctx = self.sequence_tokens
        if self.hard_context and ctx is not None and prompt + max_tokens > ctx:
            return [
                f"a {prompt}-token prompt and max_tokens={max_tokens} exceed {self.what}'s context of "
                f"{ctx} tokens (lower max_tokens)"
            ]
        return []

    def shortfalls(self, n: int, prompt: int, max_tokens: int) -> list[str]:
        """What runs only in part: samples cut short, or waiting for room."""
        lines = []
        ctx = self.sequence_tokens
        if not self.hard_context and ctx is not None and prompt + max_tokens > ctx:
            lines.append(
                f"samples are cut at {max(ctx - prompt, 0)} tokens, not max_tokens={max_tokens}: "
                f"{self.what} holds {ctx} tokens per sequence, the prompt is {prompt}"
            )
        if self.sequences is not None and n > self.sequences:
            lines.append(f"{n} samples run in turns: {self.what} decodes {self.sequences} at once")
        need = n * min(prompt + max_tokens, ctx or prompt + max_tokens)
        if self.tokens is not None and need > self.tokens:
            lines.append(
                f"{n} samples of up to {prompt + max_tokens} tokens may need {need} cached tokens; "
                f"{self.what} holds {self.tokens}: samples wait (preempted) when it is full"
            )
        return lines


@runtime_checkable
class CompletionStream(Protocol):
    """The object ``Backend.stream()`` yields: an async iterator of deltas with live usage."""

    usage: Usage

    def __aiter__(self) -> AsyncIterator[Delta]: ...

    async def abort(self, index: int) -> None:
        """Stop choice ``index``; the others continue. Raises if not supported. May be called for
        several choices at once (concurrently): each returns once its own choice is stopped."""
        ...


@runtime_checkable
class Backend(Protocol):
    """A source of completions. Built-ins and plugins implement exactly this."""

    name: str

    @property
    def capabilities(self) -> Capabilities: ...

    def stream(self, request: GenerateRequest) -> AbstractAsyncContextManager[CompletionStream]: ...

    async def count_tokens(self, text: str) -> tuple[int, str]:
        """Number of tokens in ``text`` and how it was counted ("tokenizer" or "estimate")."""
        ...

    async def aclose(self) -> None: ...


async def open_backend(backend: Backend) -> None:
    """Run ``backend.open()`` where the backend has one (it is optional in the protocol)."""
    opener = getattr(backend, "open", None)
    if opener is not None:
        await opener()


@runtime_checkable
class SharedSession(Protocol):
    """Hogwild!-style workers over one KV cache of segments (``Capabilities.shared_cache``).

    A segment is a run of tokens whose keys are stored rotated at segment-local positions; a view is an
    ordered list of segments, each placed at the summed length of those before it. Rows of one forward
    must write to distinct segments.

    The same session at each layer: the engine's ``EngineSharedSession`` (paragen/engine/hogwild),
    the engine backend's ``AsyncSharedSession`` over it, the scripted backend's
    ``ScriptedSharedSession``, and the run's ``RunSharedSession`` (paragen/_shared.py) around any of them.
    """

    eos_token_ids: frozenset[int]
    max_view_tokens: int  # the model's positions: no view may grow longer
    # Prompt tokens written by taking another session's cache instead of a forward (0 where none is
    # shared): the engine's sessions whose prompts begin alike share those blocks.
    num_reused_tokens: int

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text``, no special tokens added."""
        ...

    def detokenize(self, token_ids: Sequence[int]) -> str: ...

    def apply_chat_template(self, messages: Sequence[dict[str, str]]) -> str:
        """The model's chat template rendered with a generation prompt, as text."""
        ...

    def segment_length(self, segment: int) -> int: ...

    async def new_segment(self) -> int: ...

    async def new_segments(self, count: int) -> list[int]:
        """``count`` new segments in one call (each call is a round trip to the engine's thread)."""
        ...

    async def forward(
        self, rows: Sequence[SharedRow], *, suppress_token_ids: Sequence[int] = (), greedy: bool = False
    ) -> list[SharedSample]:
        """One forward pass over all rows; one sample per row, in row order."""
        ...

    async def free_segment(self, segment: int) -> None: ...

    async def append_from(self, dst: int, src: int, *, clear: bool = False) -> None:
        """Copy ``src``'s tokens onto the end of ``dst`` (keys re-rotated to their new place; no forward).

        A finished step folded into the history this way keeps a view at a few segments however long
        the run; ``src`` is left as it was (free it when no view lists it), or with ``clear`` emptied
        in the same call (its blocks freed; the next write places it anew): a worker's next step.
        """
        ...


@runtime_checkable
class SharedSessionBackend(Protocol):
    """A backend with ``capabilities.shared_cache``: opens shared sessions.

    Leaving the context (normally, by error or by cancellation) frees every segment's blocks.
    """

    def shared_session(
        self, params: SamplingParams, *, num_workers: int
    ) -> AbstractAsyncContextManager[SharedSession]: ...


def refuse_tools(backend: str, request: GenerateRequest) -> None:
    """One clear error for function calling on a backend that has none (``capabilities.tools``)."""
    if request.tools is not None:
        raise ConfigError(
            f"the {backend} backend does not take tools (function calling)",
            hint="serve an OpenAI-compatible server that does (e.g. --backend openai:URL)",
        )


def estimate_tokens(text: str) -> int:
    """A rough count for backends without a tokenizer: about 4 characters per token."""
    return max(1, (len(text) + 3) // 4) if text else 0


async def generate(backend: Backend, request: GenerateRequest) -> list[Completion]:
    """Drain ``backend.stream(request)`` into one Completion per choice, in index order."""
    parts: dict[int, _Accumulator] = {i: _Accumulator() for i in range(request.n)}
    async with backend.stream(request) as stream:
        async for delta in stream:
            parts[delta.index].add(delta)
    return [acc.completion(index) for index, acc in sorted(parts.items())]


class _Accumulator:
    __slots__ = ("finish", "ids", "logprobs", "num_tokens", "texts", "thinking", "tool_pieces", "tops")

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.thinking: list[str] = []
        self.ids: list[int] | None = []
        self.logprobs: list[float] | None = []
        self.tops: list[list[float]] | None = []
        self.num_tokens = 0
        self.finish: str | None = None
        self.tool_pieces: list[dict[str, Any]] = []

    def add(self, delta: Delta) -> None:
        self.texts.append(delta.text)
        if delta.reasoning:
            self.thinking.append(delta.reasoning)
        self.num_tokens += delta.num_tokens
        self.ids = None if self.ids is None or delta.token_ids is None else [*self.ids, *delta.token_ids]
        if self.logprobs is not None:
            self.logprobs = None if delta.logprobs is None else [*self.logprobs, *delta.logprobs]
        if self.tops is not None:
            tops = delta.top_logprobs
            self.tops = None if tops is None else [*self.tops, *(list(t) for t in tops)]
        if delta.tool_calls:
            self.tool_pieces.extend(delta.tool_calls)
        if delta.finish_reason is not None:
            self.finish = delta.finish_reason

    def completion(self, index: int) -> Completion:
        return Completion(
            index=index,
            text="".join(self.texts),
            token_ids=self.ids,
            num_tokens=self.num_tokens,
            finish_reason=self.finish or "abort",
            logprobs=self.logprobs or None,
            top_logprobs=self.tops or None,
            tool_calls=merge(self.tool_pieces) if self.tool_pieces else None,
            reasoning="".join(self.thinking),
        )
