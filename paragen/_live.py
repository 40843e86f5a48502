"""A sample while it runs: the trace being built from deltas, and how to stop it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import anyio

from paragen._tool_calls import merge
from paragen.backends.base import CompletionStream
from paragen.reasoning import (
    ThinkFormat,
    after_prefill,
    join_thinking,
    prefill_of,
    split_thinking,
    tokens_before,
)
from paragen.types import (
    ChatMessage,
    CountSource,
    Delta,
    FinishReason,
    GenerateRequest,
    Trace,
    TraceStatus,
    Usage,
)

Monitor = Callable[["LiveSample"], str | Awaitable[str | None] | None]
"""Called after each delta of a sample; returning a reason prunes the sample with it. An async
monitor is awaited before the sample's next delta is read (what a probe of the sample needs)."""


class LiveSample:
    """Builds one :class:`Trace` from a stream of deltas and knows how to stop that stream.

    A sample is stopped either through its own cancel scope (an independent request)
    or, for one choice of a shared ``n > 1`` request, by aborting that choice.

    Thinking the server sent apart (``Delta.reasoning``) is kept apart; otherwise the text is
    split by ``think_format`` (the model family's delimiters) when the trace is brought up to date.
    """

    __slots__ = (
        "_chunks",
        "_finish_reason",
        "_first_token",
        "_piece_source",
        "_reasoning_tokens",
        "_server_reasoning_tokens",
        "_thinking",
        "_tokens",
        "_tool_pieces",
        "_uneven",
        "group",
        "index",
        "logprobs",
        "on_stop",
        "request",
        "scope",
        "stop_reason",
        "stop_status",
        "stream",
        "think_format",
        "top_logprobs",
        "trace",
    )

    def __init__(self, trace: Trace, index: int = 0, think_format: ThinkFormat = "think") -> None:
        self.trace = trace
        self.index = index
        self.think_format: ThinkFormat = think_format
        self._chunks: list[str] = []
        # Tokens of the chunks that were not one token each, by chunk index (most are one): how
        # many tokens a thinking section split from the text took, without a list append per delta.
        self._uneven: dict[int, int] = {}
        self._thinking: list[str] = []  # thinking the server sent apart
        self._reasoning_tokens = 0  # the tokens of the pieces that carried thinking
        self._server_reasoning_tokens: int | None = None
        self._piece_source: CountSource | None = None  # how the pieces were counted, if not as the total
        self._tokens = 0
        self._first_token: float | None = None
        self._finish_reason: FinishReason | None = None
        self._tool_pieces: list[dict[str, Any]] = []
        self.logprobs: list[float] = []
        self.top_logprobs: list[list[float]] = []
        self.scope: anyio.CancelScope | None = None
        self.group: CompletionStream | None = None
        self.on_stop: Callable[[], None] | None = None  # closes the trace when its choice is aborted
        self.request: GenerateRequest | None = None  # what it was asked (set once it is driven)
        self.stream: CompletionStream | None = None  # the stream it comes from (a fork's parent)
        self.stop_reason: str | None = None
        self.stop_status: TraceStatus = "cancelled"

    @property
    def is_running(self) -> bool:
        return self.trace.end is None

    @property
    def num_tokens(self) -> int:
        return self._tokens

    @property
    def finished(self) -> bool:
        """The backend sent its last delta (the trace may not be closed yet)."""
        return self._finish_reason is not None

    @property
    def split_by_server(self) -> bool:
        """The server sent the thinking apart (so :meth:`text` writes its delimiters back)."""
        return bool(self._thinking)

    def text(self) -> str:
        """The raw text so far, thinking included as the model writes it (joined lazily: the hot path
        only appends): what a continuation prefills and a monitor of the whole output reads."""
        if not self._thinking:
            return "".join(self._chunks)
        answer, thinking = "".join(self._chunks), "".join(self._thinking)
        return join_thinking(thinking, answer, "closed" if answer else "open", self.think_format)

    def text_since(self, start: int) -> tuple[str, int]:
        """The answer text of the deltas from the ``start``-th on, and how many deltas there are now:
        what a monitor forwarding the text as it grows reads after every delta, without joining it all."""
        chunks = self._chunks
        return "".join(chunks[start:]), len(chunks)

    def reasoning_since(self, start: int) -> tuple[str, int]:
        """As :meth:`text_since`, for the thinking the server sent apart."""
        thinking = self._thinking
        return "".join(thinking[start:]), len(thinking)

    def add(self, delta: Delta, now: float) -> None:
        # The hot path: plain slots only; the pydantic trace is brought up to date in snapshot().
        if self._first_token is None:
            self._first_token = now
        if delta.num_tokens != 1:
            self._uneven[len(self._chunks)] = delta.num_tokens
        self._chunks.append(delta.text)
        self._tokens += delta.num_tokens
        if delta.reasoning:
            self._thinking.append(delta.reasoning)
            self._reasoning_tokens += delta.num_tokens
        if delta.logprobs:
            self.logprobs.extend(delta.logprobs)
        if delta.top_logprobs:
            self.top_logprobs.extend(list(t) for t in delta.top_logprobs)
        if delta.tool_calls:
            self._tool_pieces.extend(delta.tool_calls)
        if delta.finish_reason is not None:
            self._finish_reason = delta.finish_reason

    def snapshot(self) -> Trace:
        """Bring the trace (text, token count, first-token time, finish reason) up to date and return it."""
        trace = self.trace
        trace.completion_tokens = self._tokens
        self._split(trace)
        trace.first_token = self._first_token
        if self._finish_reason is not None:
            trace.finish_reason = self._finish_reason
        if self._tool_pieces:
            trace.tool_calls = merge(self._tool_pieces)
        return trace

    def _split(self, trace: Trace) -> None:
        """Set the trace's thinking and answer parts, and the tokens the thinking took."""
        if self._thinking:
            trace.text = "".join(self._chunks)
            trace.reasoning = "".join(self._thinking)
            trace.thinking = "closed" if trace.text else "open"
            tokens = self._reasoning_tokens
        else:
            split = split_thinking("".join(self._chunks), self.think_format)
            trace.text, trace.reasoning, trace.thinking = split.answer, split.reasoning, split.state
            tokens = tokens_before(split.answer_start, self._chunks, self._uneven)
        if trace.thinking == "open":  # still thinking at its end: every token it wrote was thinking
            tokens = self._tokens
        server = self._server_reasoning_tokens
        # The server's count, unless it contradicts what streamed: vLLM's text-matching parsers
        # (olmo3) report 0 reasoning tokens for output they streamed as reasoning.
        if server is not None and (server > 0) == (tokens > 0):
            trace.reasoning_tokens, trace.reasoning_count_source = server, "server"
        else:
            trace.reasoning_tokens = tokens
            trace.reasoning_count_source = self._reasoning_source(trace)

    def _reasoning_source(self, trace: Trace) -> CountSource:
        """How the thinking tokens were counted, the server's reasoning count aside: a sample still
        thinking at its end thought every token (the total's count); otherwise the pieces before
        the end of thinking were counted, as the stream counted its pieces."""
        if trace.thinking == "none":
            return "none"
        if trace.thinking == "open":
            return trace.count_source
        return self._piece_source or trace.count_source

    def apply_usage(self, usage: Usage, *, choices: int = 1) -> int:
        """Take the backend's counts; returns how many completion tokens the server count adds.

        ``usage`` covers the whole request; with ``choices`` > 1 (one request shared by several
        samples) the prompt counts once per choice, so each trace takes its share, and the
        cached prompt tokens go to the choices that were served from the one prefill first.
        """
        trace = self.trace
        trace.count_source = usage.source
        self._piece_source = usage.piece_source
        prompt = usage.prompt_tokens // choices
        trace.prompt_tokens = prompt
        if usage.cached_prompt_tokens is not None:
            cached = usage.cached_prompt_tokens
            if choices > 1:  # later choices reuse the prefill; the first takes what is left
                cached = prompt if self.index > 0 else max(0, cached - (choices - 1) * prompt)
            trace.cached_prompt_tokens = cached
        hedged = self._take_hedges(usage) if self.index == 0 else 0  # a request's hedges: its first choice's
        shared = choices > 1
        if usage.reasoning_tokens is not None and not shared and usage.source == "server":
            self._server_reasoning_tokens = usage.reasoning_tokens  # not per choice when shared
        if usage.source == "server" and not shared and usage.completion_tokens >= self._tokens:
            extra = usage.completion_tokens - self._tokens
            self._tokens = usage.completion_tokens
            trace.completion_tokens = self._tokens
            return extra + hedged
        return hedged

    def _take_hedges(self, usage: Usage) -> int:
        """Record the request's hedges on the trace; returns the hedged tokens not charged before."""
        trace = self.trace
        new = max(0, usage.hedged_tokens - trace.hedged_tokens)
        trace.hedges, trace.hedged_tokens = usage.hedges, max(trace.hedged_tokens, usage.hedged_tokens)
        return new

    def request_stop(self, reason: str, status: TraceStatus) -> None:
        """Mark the sample to stop; the caller then cancels its scope or aborts its choice."""
        if self.stop_reason is None and self.is_running:
            self.stop_reason = reason
            self.stop_status = status

    def finish(self, now: float, *, error: str | None = None) -> Trace:
        """Close the trace: ok, stopped (with its reason) or failed."""
        trace = self.snapshot()
        if trace.end is not None:
            return trace
        trace.end = now
        if error is not None:
            trace.status, trace.error = "error", error
            trace.finish_reason = trace.finish_reason or "error"
        elif self.stop_reason is not None and trace.finish_reason in (None, "abort"):
            trace.status, trace.cancel_reason = self.stop_status, self.stop_reason
            trace.finish_reason = "abort"
        elif trace.finish_reason is None:
            trace.status, trace.cancel_reason, trace.finish_reason = "cancelled", "abandoned", "abort"
        if self.logprobs:
            trace.logprobs = self.logprobs
        if self.top_logprobs:
            trace.top_logprobs = self.top_logprobs
        return trace


def continuation(live: LiveSample, suffix: str, **params: Any) -> GenerateRequest:
    """A request continuing ``live``'s text so far followed by ``suffix`` (one choice, ``params`` set).

    Chat requests get the text as a prefilled assistant reply (``continue_final``), appended to
    the one the sample was already continuing; raw prompts get it appended. The text is the raw
    one, thinking included in the family's delimiters: a sample stopped mid-thought goes on thinking.
    """
    request = live.request
    if request is None:
        raise ValueError("the sample has not started: nothing to continue")
    so_far = live.text()
    if live.split_by_server:  # the thinking written back with its opener, once after the prefill
        so_far = after_prefill(so_far, prefill_of(request), live.think_format)
    so_far += suffix
    update: dict[str, Any] = {"n": 1, "continue_final": request.messages is not None}
    if request.prompt is not None:
        update["prompt"] = request.prompt + so_far
    else:
        messages = list(request.messages or ())
        if request.continue_final:
            last = messages.pop()
            so_far = last.content + so_far
        update["messages"] = (*messages, ChatMessage(role="assistant", content=so_far))
    return request.model_copy(update=update).with_params(**params)


async def stop_sample(live: LiveSample, reason: str, status: TraceStatus) -> None:
    """Stop one running sample: cancel its own request, or abort its choice of a shared one."""
    await stop_samples([live], reason, status)


async def stop_samples(lives: Iterable[LiveSample], reason: str, status: TraceStatus) -> None:
    """Stop running samples as one operation: every one is marked (and its own request's scope
    cancelled) before any abort is awaited, then the choices' aborts run together.

    So a cancel of n samples waits as long as one abort (the engine applies the aborts that
    arrive together at one step boundary), and a sample marked here cannot end "ok" while
    another's abort is awaited: its later deltas are dropped.
    """
    to_abort: list[LiveSample] = []
    for live in lives:
        if not live.is_running or live.stop_reason is not None:
            continue
        live.request_stop(reason, status)
        if live.scope is not None:
            live.scope.cancel()
        elif live.group is not None:
            to_abort.append(live)
    await abort_choices(to_abort)


async def abort_choices(lives: Sequence[LiveSample]) -> None:
    """Abort the choices of ``lives`` (of shared streams, marked to stop) all at once, each trace
    closed once its own abort has landed."""
    if len(lives) == 1:
        await _abort_choice(lives[0])
    elif lives:
        # Shielded as each abort is: a cancel that arrives meanwhile (a deadline) must not cut the
        # aborts short, nor surface from this group inside a caller's cleanup (a fan-out's exit).
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as group:
                for live in lives:
                    group.start_soon(_abort_choice, live)


async def _abort_choice(live: LiveSample) -> None:
    assert live.group is not None
    await live.group.abort(live.index)
    if live.on_stop is not None:
        live.on_stop()
