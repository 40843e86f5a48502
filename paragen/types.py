"""The data that flows through paragen: problems, requests, deltas, traces, results.

Configs and results are pydantic models (``extra="forbid"``, so a misspelt field is an
error, not a silent default). :class:`Delta` sits on the hot path (one per generated
token or chunk), so it is a slotted dataclass instead.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# "repetition": the server stopped a sample that repeats itself (vLLM's repetition_detection).
FinishReason = Literal["stop", "length", "abort", "error", "tool_calls", "repetition"]
TraceStatus = Literal["ok", "cancelled", "pruned", "error"]
TraceKind = Literal["sample", "judge", "tool", "probe", "score"]
CountSource = Literal["server", "token_ids", "tokenizer", "estimate", "none"]
# Whether a sample's text had no thinking section, a finished one, or one still open at its end
# (cut off while thinking: no answer). See paragen.reasoning.
ThinkingState = Literal["none", "closed", "open"]

_request_ids = itertools.count()


def _require_utf8(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates: bytes that were not UTF-8 on the way in
        raise ValueError(f"{what} is not valid UTF-8 (byte at position {exc.start})") from None


SEED_MAX = 2**63 - 2**32

MAX_TOKENS = 1_000_000
"""The most tokens one request may ask for (``SamplingParams.max_tokens``)."""

TokenCount = Annotated[int, Field(gt=0, le=MAX_TOKENS)]
"""A positive number of tokens a request can ask for: the type of every token-count option, so an
option too large for any request is refused where it is set, not when the first request is built."""


class Model(BaseModel):
    """Base of paragen's pydantic models: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid")


class Problem(Model):
    """One question to answer; ``gold`` is the reference answer when it is known."""

    id: str = "problem"
    question: str
    gold: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    @field_validator("question")
    @classmethod
    def _question_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the question is empty")
        _require_utf8(value, "the question")
        return value


class SamplingParams(Model):
    """How to sample one completion. ``top_k=0`` and ``top_p=1`` switch those filters off."""

    # NaN and infinity are refused by name (a NaN otherwise fails "ge" with a misleading message).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    max_tokens: TokenCount = 512
    temperature: float = Field(default=0.7, ge=0.0, le=10.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0)
    # Non-negative and within int64 (what servers parse), with room for the per-sample seed + i.
    seed: int | None = Field(default=None, ge=0, le=SEED_MAX)
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    top_logprobs: int = Field(default=0, ge=0, le=20)

    @field_validator("stop")
    @classmethod
    def _stops_not_empty(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(not s for s in value):
            raise ValueError("stop strings must be non-empty")
        return value


class ChatMessage(Model):
    """One chat turn."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["system", "user", "assistant"]
    content: str


class ToolOptions(Model):
    """OpenAI's function calling, as a request forwards it: the tools, ``tool_choice`` and
    ``parallel_tool_calls``, each as the client wrote it (only OpenAI-compatible backends take them)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tools: tuple[dict[str, Any], ...] = Field(min_length=1)
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None


ToolVoteRule = Literal["name", "arguments", "hierarchical"]
"""What makes two samples' tool calls one ballot in a vote over them (the ``tool_vote`` strategy)."""

TextSink = Callable[[str], None]
"""Receives a sample's text as it grows, piece by piece (for streaming it to a client)."""


class GenerateRequest(Model):
    """What a backend is asked for: a raw prompt or chat messages, sampled ``n`` times.

    ``continue_final`` continues the last (assistant) message instead of opening a new
    assistant turn; strategies use it to prefill a reply (NoThinking, budget forcing).
    ``affinity`` groups requests that share a prefix, so a server pool routes them to
    one replica and its prefix cache serves them. ``hedge_after_s`` overrides the backend's
    hedging for this request (a pool sends it to a second replica when no token came within
    that many seconds; 0 at once, ``inf`` never; None: the backend's ``hedge_after_s``).
    ``thinking_budget`` asks the server to end the sample's thinking after that many tokens
    (taken where ``capabilities.thinking_budget`` says so; other backends ignore it).
    """

    prompt: str | None = None
    messages: tuple[ChatMessage, ...] | None = None
    params: SamplingParams = Field(default_factory=SamplingParams)
    n: int = Field(default=1, gt=0, le=1024)
    continue_final: bool = False
    affinity: str | None = None
    tools: ToolOptions | None = None  # function calling (chat only); the reply may be tool calls
    hedge_after_s: float | None = Field(default=None, ge=0)
    thinking_budget: int | None = Field(default=None, ge=0)
    request_id: str = Field(default_factory=lambda: f"pg-{next(_request_ids)}")

    @model_validator(mode="after")
    def _one_input(self) -> GenerateRequest:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of prompt or messages")
        if self.prompt is not None and not self.prompt:
            raise ValueError("the prompt is empty")
        for text in [self.prompt or "", *(m.content for m in self.messages or ())]:
            _require_utf8(text, "the prompt")
        if self.tools is not None and self.messages is None:
            raise ValueError("tools need chat messages, not a raw prompt")
        if self.messages is not None:
            if not self.messages:
                raise ValueError("messages is empty")
            if self.continue_final and self.messages[-1].role != "assistant":
                raise ValueError("continue_final needs the last message to be the assistant's")
        return self

    def with_params(self, **changes: Any) -> GenerateRequest:
        """A copy with some sampling parameters changed (and a fresh request id)."""
        params = self.params.model_copy(update=changes)
        return self.model_copy(update={"params": params, "request_id": f"pg-{next(_request_ids)}"})


@dataclass(slots=True)
class Delta:
    """A piece of one choice's output as it streams.

    ``num_tokens`` is how many tokens this piece stands for; it is exact when
    ``token_ids`` is given or the server counts (see the stream's ``usage.source``).
    ``logprobs`` holds the chosen tokens' log-probabilities; ``top_logprobs`` the
    best alternatives' log-probabilities per token (for confidence measures).
    The last delta of a choice carries its ``finish_reason``. ``tool_calls`` are pieces of
    function calls as OpenAI streams them (``{"index", "id", "type", "function": {"name",
    "arguments"}}``, arguments in pieces); :func:`paragen._tool_calls.merge` joins them.
    ``reasoning`` is thinking text the server sent apart from the answer (its reasoning parser's
    ``reasoning`` / ``reasoning_content``); a piece's tokens are the thinking's when it has some.
    """

    index: int
    text: str
    num_tokens: int
    token_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None
    top_logprobs: tuple[tuple[float, ...], ...] | None = None
    finish_reason: FinishReason | None = None
    tool_calls: tuple[dict[str, Any], ...] | None = None
    reasoning: str = ""


class Usage(Model):
    """Token counts of one request and how they were obtained.

    ``hedges`` is how many hedged copies of the request were sent to other replicas, and
    ``hedged_tokens`` the completion tokens the losing copies streamed before they were
    closed (not part of ``completion_tokens``, which are the winner's). ``reasoning_tokens`` is
    the server's count of the completion tokens spent thinking
    (``usage.completion_tokens_details.reasoning_tokens``), None where it reports none.
    ``piece_source`` is how the streamed pieces were counted one by one where that was weaker than
    ``source`` (a server's final total replaced their sum: llama.cpp, SGLang), so a count of some
    of the pieces (the thinking's) is that exact; None: as ``source``.
    """

    prompt_tokens: int = 0
    cached_prompt_tokens: int | None = None
    completion_tokens: int = 0
    source: CountSource = "none"
    piece_source: CountSource | None = None
    hedges: int = 0
    hedged_tokens: int = 0
    reasoning_tokens: int | None = None


class Completion(Model):
    """One finished choice as a backend produced it (what ``generate()`` returns); ``reasoning`` is
    the thinking a server sent apart from ``text`` (empty where it sent none)."""

    index: int = 0
    text: str
    token_ids: list[int] | None = None
    num_tokens: int
    finish_reason: FinishReason
    logprobs: list[float] | None = None
    top_logprobs: list[list[float]] | None = None
    tool_calls: list[dict[str, Any]] | None = None  # whole calls, OpenAI's message format
    reasoning: str = ""


class Trace(Model):
    """The record of one sample (or judge call, or tool call) inside a run.

    Times are seconds on the run's monotonic clock (0 = the run's start). A cancelled
    or pruned trace keeps the text and tokens it had produced up to that moment.

    A reasoning model's output is kept in two parts: ``reasoning`` (its thinking, delimiters
    dropped) and ``text`` (its answer: what followed the thinking, the whole output when it had
    no thinking section, empty when it was cut off while thinking). ``thinking`` says which of
    those it was. ``reasoning_tokens`` of the ``completion_tokens`` were thinking, counted as
    ``reasoning_count_source`` says ("server": the server's usage, or its total where the sample
    ended still thinking; else how the streamed pieces before the end of thinking were counted).
    """

    id: int
    label: str = "sample"
    kind: TraceKind = "sample"
    status: TraceStatus = "ok"
    text: str = ""
    completion_tokens: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int | None = None
    count_source: CountSource = "none"
    finish_reason: FinishReason | None = None
    start: float = 0.0
    first_token: float | None = None
    end: float | None = None
    cancel_reason: str | None = None
    error: str | None = None
    answer: str | None = None
    logprobs: list[float] | None = None
    top_logprobs: list[list[float]] | None = None
    parents: list[int] = Field(default_factory=list)
    meta: dict[str, Any] = Field(default_factory=dict)
    tool_calls: list[dict[str, Any]] | None = None  # the function calls it made (OpenAI's format)
    hedges: int = 0  # hedged copies of its request (see Usage)
    hedged_tokens: int = 0  # what the losing copies streamed; not in completion_tokens
    # A verifier's scores of this sample's steps (search strategies set them), so the eval bank can
    # re-score weighted best-of-N offline; the score traces themselves are kind "score".
    scores: list[float] | None = None
    reasoning: str = ""
    thinking: ThinkingState = "none"
    reasoning_tokens: int = 0
    reasoning_count_source: CountSource = "none"

    @property
    def answer_tokens(self) -> int:
        """The completion tokens that were not thinking."""
        return max(0, self.completion_tokens - self.reasoning_tokens)

    @property
    def is_ok(self) -> bool:
        return self.status == "ok"

    @property
    def is_truncated(self) -> bool:
        return self.finish_reason == "length"


class RunUsage(Model):
    """The accounting every strategy reports the same way.

    ``sequential_tokens`` is the critical path: the largest sum of generated tokens
    along a chain of traces each of which started after the previous one ended (or
    named it as a parent). ``wasted_tokens`` were generated and then cancelled,
    pruned or failed. Judge and tool work is counted apart from the samples, and so are
    probes (kind "probe": a short continuation asking a running sample for its answer so
    far, as Dynasor does): ``probe_tokens`` are their generated tokens, never part of
    ``total_tokens``; their prompt tokens are in ``prompt_tokens`` like every trace's.
    ``hedged_tokens`` are the tokens hedged requests' losing copies streamed before they
    were closed: part of ``total_tokens`` and ``wasted_tokens``, never of a trace's text.
    A verifier's work (kind "score": a reward model's call, or the generator asked whether a
    step is correct) is counted apart as well: ``score_tokens`` are the tokens it read and wrote
    (prompt and completion), ``num_scores`` its calls; its time is in the latency like any wait.
    ``reasoning_tokens`` and ``answer_tokens`` split the samples' completion tokens into thinking
    and answer (they sum to ``total_tokens`` less ``hedged_tokens``); ``num_open_thinking`` samples
    ended while still thinking (no answer).
    """

    total_tokens: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int | None = None
    sequential_tokens: int = 0
    wasted_tokens: int = 0
    judge_tokens: int = 0
    probe_tokens: int = 0
    num_probes: int = 0
    score_tokens: int = 0
    num_scores: int = 0
    num_samples: int = 0
    num_cancelled: int = 0
    num_errors: int = 0
    num_hedges: int = 0
    hedged_tokens: int = 0
    latency_s: float = 0.0
    ttft_s: float | None = None
    count_sources: list[CountSource] = Field(default_factory=list)
    reasoning_tokens: int = 0
    answer_tokens: int = 0
    num_open_thinking: int = 0


class StrategyResult(Model):
    """What a strategy returns: the answer (None = NO_ANSWER), the traces and the accounting."""

    strategy: str
    problem_id: str
    answer: str | None
    text: str | None = None
    reasoning: str | None = None  # the thinking of the sample whose text is ``text``, where it had some
    stop_reason: Literal["done", "deadline", "budget", "error"] = "done"
    error: str | None = None
    traces: list[Trace] = Field(default_factory=list)
    usage: RunUsage = Field(default_factory=RunUsage)
    metrics: dict[str, float] = Field(default_factory=dict)
    config: dict[str, Any] = Field(default_factory=dict)
    tool_calls: list[dict[str, Any]] | None = None  # the reply is these function calls (OpenAI's format)
    details: dict[str, Any] = Field(default_factory=dict)  # findings that are not numbers (a tool vote)


@dataclass(frozen=True, slots=True)
class SharedRow:
    """One worker's input to a shared session's forward pass (Hogwild!: docs/hogwild.md)."""

    worker: int  # which worker's sampler stream (seed = params.seed + worker)
    view: Sequence[int]  # segment ids, in order; the input tokens are appended to view[-1]
    # >= 1 input tokens written into view[-1]; every row writes (layer by layer) before any row reads,
    # so peers see each other's new tokens in the same forward pass.
    token_ids: Sequence[int]


@dataclass(frozen=True, slots=True)
class SharedSample:
    """The next token sampled from a shared session's row, at its last position."""

    token_id: int
    logprob: float | None = None  # when the session's params ask for logprobs
