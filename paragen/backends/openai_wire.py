"""The OpenAI-compatible wire format, without I/O: request bodies out, stream chunks in.

Kept apart from the client so the mapping (what each SamplingParams field becomes on
the wire, how a chunk turns into deltas and usage) is plain functions, testable
without a server or an event loop. Chunks are validated by lenient pydantic models:
servers add fields freely (vLLM's ``stop_reason``, llama.cpp's timings), so unknown
fields are ignored, but a missing or mistyped field we rely on is a protocol error.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from paragen.errors import BackendHTTPError, BackendProtocolError
from paragen.types import Delta, FinishReason, GenerateRequest, Usage

Endpoint = Literal["completions", "chat"]
ServerKind = Literal["vllm", "sglang", "llama_cpp", "openai"]

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "abort": "abort",
    "error": "error",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "repetition": "repetition",  # vLLM's repetition_detection stopped it
}


# The request field of each server's thinking budget (the most tokens a sample may think before
# the server ends its thinking); OpenAI's own API has none.
THINKING_BUDGET_FIELD: dict[ServerKind, str] = {
    "vllm": "thinking_token_budget",  # needs the server's --reasoning-parser or --reasoning-config
    "sglang": "thinking_budget",  # enforced with the server's --enable-strict-thinking
    # llama-server's per-request cap (it also takes the name reasoning_budget_tokens), in place of
    # --reasoning-budget there; chat requests only: the thinking delimiters come from the chat template.
    "llama_cpp": "thinking_budget_tokens",
}


@dataclass(frozen=True, slots=True)
class WireOptions:
    """What the probe learnt about a server that changes the body we send."""

    model: str
    endpoint: Endpoint
    _: KW_ONLY
    kind: ServerKind = "openai"
    continuous_usage: bool = False  # vLLM: usage on every chunk, so counts are live and exact
    rid: str | None = None  # SGLang: client-chosen request id, so /abort_request can name it
    thinking_budget: int | None = None  # the backend's default, for requests that set none


def build_body(request: GenerateRequest, options: WireOptions) -> dict[str, Any]:
    """The JSON body of one streaming request."""
    params = request.params
    body: dict[str, Any] = {"model": options.model}
    if options.endpoint == "chat":
        body["messages"] = _messages(request)
        if request.continue_final:
            # vLLM's extension: continue the prefilled assistant turn instead of opening a new one.
            body["continue_final_message"] = True
            body["add_generation_prompt"] = False
        body.update(_tool_fields(request))
    else:
        body["prompt"] = request.prompt
    body["max_tokens"] = params.max_tokens
    body["temperature"] = params.temperature
    body["top_p"] = params.top_p
    if params.top_k > 0:
        body["top_k"] = params.top_k  # not in OpenAI's API; vLLM, SGLang and llama.cpp take it
    if request.n > 1:
        body["n"] = request.n
    if params.stop:
        body["stop"] = list(params.stop)
    if params.seed is not None:
        body["seed"] = params.seed
    body.update(_logprobs_fields(request, options.endpoint, options.kind))
    body["stream"] = True
    stream_options: dict[str, Any] = {"include_usage": True}
    if options.continuous_usage:
        stream_options["continuous_usage_stats"] = True
    body["stream_options"] = stream_options
    if options.rid is not None:
        body["rid"] = options.rid
    budget = options.thinking_budget if request.thinking_budget is None else request.thinking_budget
    if budget is not None and options.kind in THINKING_BUDGET_FIELD:
        body[THINKING_BUDGET_FIELD[options.kind]] = budget
    return body


def _messages(request: GenerateRequest) -> list[dict[str, str]]:
    if request.messages is None:
        # A raw prompt on a chat-only server becomes one user turn.
        return [{"role": "user", "content": request.prompt or ""}]
    return [{"role": m.role, "content": m.content} for m in request.messages]


def _tool_fields(request: GenerateRequest) -> dict[str, Any]:
    """Function calling, forwarded as the client wrote it."""
    tools = request.tools
    if tools is None:
        return {}
    fields: dict[str, Any] = {"tools": list(tools.tools)}
    if tools.tool_choice is not None:
        fields["tool_choice"] = tools.tool_choice
    if tools.parallel_tool_calls is not None:
        fields["parallel_tool_calls"] = tools.parallel_tool_calls
    return fields


def _logprobs_fields(request: GenerateRequest, endpoint: Endpoint, kind: str) -> dict[str, Any]:
    params = request.params
    if not params.logprobs and params.top_logprobs == 0:
        return {}
    if endpoint == "chat":
        fields: dict[str, Any] = {"logprobs": True}
        # llama-cpp-python's chat endpoint sends no logprobs at all unless alternatives are asked
        # for: one is, and the chosen tokens' log-probabilities come with it.
        top = params.top_logprobs or (1 if kind == "llama_cpp" else 0)
        if top:
            fields["top_logprobs"] = top
        return fields
    # The legacy completions API takes one integer: how many alternatives per token
    # (0 = only the chosen token's log-probability).
    return {"logprobs": params.top_logprobs}


# --- chunks ------------------------------------------------------------------------------


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _PromptDetails(_Lenient):
    cached_tokens: int | None = None


class _CompletionDetails(_Lenient):
    reasoning_tokens: int | None = None


class _Usage(_Lenient):
    prompt_tokens: int | None = None
    completion_tokens: int = 0
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None


class _CompletionLogprobs(_Lenient):
    token_logprobs: list[float | None] = []
    top_logprobs: list[dict[str, float] | None] | None = None


class _ChatTop(_Lenient):
    logprob: float


class _ChatToken(_Lenient):
    logprob: float
    top_logprobs: list[_ChatTop] = []


class _ChatLogprobs(_Lenient):
    content: list[_ChatToken] | None = None


class _ChatDelta(_Lenient):
    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    # Thinking a server's reasoning parser sent apart: vLLM's field since late 2025, and the one
    # older vLLM, SGLang, llama.cpp and DeepSeek's API send.
    reasoning: str | None = None
    reasoning_content: str | None = None


class _Choice(_Lenient):
    index: int = 0
    text: str | None = None  # completions
    delta: _ChatDelta | None = None  # chat
    logprobs: _CompletionLogprobs | _ChatLogprobs | None = None
    finish_reason: str | None = None


class _Chunk(_Lenient):
    choices: list[_Choice] = []
    usage: _Usage | None = None
    error: dict[str, Any] | str | None = None
    object: str | None = None  # "error" when an error object is sent bare, not under "error"
    message: str | None = None
    code: int | str | None = None


@dataclass(slots=True)
class ChunkParser:
    """Turns the chunks of one stream into deltas, keeping the stream's usage live.

    Token counts, best first: vLLM's continuous usage (the per-choice increase of
    ``completion_tokens``, exact); else one per log-probability entry (exact); else
    one per content chunk (an estimate). The final usage chunk, when it comes,
    replaces the running count with the server's.
    """

    endpoint: Endpoint
    usage: Usage
    num_choices: int = 1
    finished: set[int] = field(default_factory=set)
    _counted: dict[int, int] = field(default_factory=dict)  # tokens attributed to each choice so far
    saw_done: bool = False  # the server's "[DONE]" sentinel arrived
    base: Usage | None = None  # a resumed request: the counts of the attempts before it
    _final: bool = False

    @property
    def is_done(self) -> bool:
        return self.saw_done or self._final or len(self.finished) >= self.num_choices

    def parse(self, data: str) -> list[Delta]:
        """Deltas of one SSE ``data`` payload (already known not to be ``[DONE]``)."""
        try:
            chunk = _Chunk.model_validate_json(data)
        except ValidationError as exc:
            raise BackendProtocolError(f"malformed stream chunk: {data[:200]!r}") from exc
        if chunk.error is not None:
            raise _stream_error(chunk.error)
        if chunk.object == "error":
            raise _stream_error({"message": chunk.message, "code": chunk.code})
        deltas = [self._delta(choice, chunk.usage) for choice in chunk.choices]
        if chunk.usage is not None and not chunk.choices:
            self._take_final(chunk.usage)
        elif chunk.usage is not None:
            self._take_prompt(chunk.usage)
        return [d for d in deltas if d.text or d.num_tokens or d.finish_reason or d.tool_calls or d.reasoning]

    def _delta(self, choice: _Choice, usage: _Usage | None) -> Delta:
        delta = choice.delta
        text = choice.text if delta is None else (delta.content or "")
        calls = None if delta is None or not delta.tool_calls else tuple(delta.tool_calls)
        reasoning = "" if delta is None else (delta.reasoning or delta.reasoning_content or "")
        logprobs, tops = _logprobs(choice.logprobs)
        counted = self._counted.get(choice.index, 0)
        if usage is not None:
            # Usage next to choices is the count so far (vLLM's continuous usage, per
            # choice), or the total in the last chunk (llama.cpp): either way, the increase.
            num_tokens, source = max(usage.completion_tokens - counted, 0), "server"
        elif logprobs is not None:
            num_tokens, source = len(logprobs), "token_ids"
        else:
            num_tokens, source = (1 if text or calls or reasoning else 0), "estimate"
        self._counted[choice.index] = counted + num_tokens
        finish = None
        if choice.finish_reason is not None:
            finish = _FINISH.get(choice.finish_reason, "stop")
            self.finished.add(choice.index)
        self._count(num_tokens, source)
        return Delta(
            choice.index,
            text or "",
            num_tokens,
            logprobs=logprobs,
            top_logprobs=tops,
            finish_reason=finish,
            tool_calls=calls,
            reasoning=reasoning,
        )

    def _count(self, num_tokens: int, source: str) -> None:
        usage = self.usage
        usage.completion_tokens += num_tokens
        if num_tokens == 0 and source != "server":
            return  # an empty chunk (role, finish) says nothing about how tokens are counted
        if source == "server" and self.num_choices == 1:
            if usage.source != "server":  # a pydantic attribute set costs; most chunks change nothing
                usage.source = "server"  # the server's count covers every token so far
            return
        # Otherwise the weakest way any token was counted is the stream's source.
        rank = ("none", "server", "token_ids", "estimate")
        if rank.index(source) > rank.index(usage.source):
            usage.source = source  # type: ignore[assignment]

    def _take_prompt(self, usage: _Usage) -> None:
        # Called on every chunk of a continuous-usage stream: no model is built here (a Usage()
        # per chunk was a measurable share of the client's per-chunk time).
        base = self.base
        if usage.prompt_tokens is not None:
            # OpenAI's usage counts the prompt once per request; paragen's, as vLLM's own counter,
            # once per choice (each choice of n > 1 is a request of its own on the server).
            before = 0 if base is None else base.prompt_tokens
            prompt_tokens = before + usage.prompt_tokens * self.num_choices
            if self.usage.prompt_tokens != prompt_tokens:
                self.usage.prompt_tokens = prompt_tokens
        if usage.prompt_tokens_details is not None and usage.prompt_tokens_details.cached_tokens is not None:
            before = 0 if base is None else base.cached_prompt_tokens or 0
            self.usage.cached_prompt_tokens = before + usage.prompt_tokens_details.cached_tokens

    def _take_final(self, usage: _Usage) -> None:
        self._take_prompt(usage)
        self.usage.completion_tokens = (self.base or Usage()).completion_tokens + usage.completion_tokens
        if self.usage.source in ("token_ids", "estimate"):
            # The pieces were counted one by one; the total is now the server's, their split is not.
            self.usage.piece_source = self.usage.source
        self.usage.source = "server"
        details = usage.completion_tokens_details
        if details is not None and details.reasoning_tokens is not None:
            before = (self.base or Usage()).reasoning_tokens or 0
            self.usage.reasoning_tokens = before + details.reasoning_tokens
        self._final = True


def _logprobs(
    raw: _CompletionLogprobs | _ChatLogprobs | None,
) -> tuple[tuple[float, ...] | None, tuple[tuple[float, ...], ...] | None]:
    if raw is None:
        return None, None
    if isinstance(raw, _ChatLogprobs):
        tokens = raw.content or []
        chosen = tuple(t.logprob for t in tokens)
        tops = tuple(tuple(sorted((a.logprob for a in t.top_logprobs), reverse=True)) for t in tokens)
        return chosen, (tops if any(tops) else None)
    chosen = tuple(float("-inf") if lp is None else lp for lp in raw.token_logprobs)
    if not raw.top_logprobs:
        return chosen, None
    tops = tuple(tuple(sorted((t or {}).values(), reverse=True)) for t in raw.top_logprobs)
    return chosen, tops


def _stream_error(error: dict[str, Any] | str) -> BackendHTTPError:
    """An error the server sent inside the stream (vLLM does this when generation fails)."""
    if isinstance(error, str):
        return BackendHTTPError(f"server error in stream: {error}", status_code=500)
    code = error.get("code")
    status = code if isinstance(code, int) and 400 <= code < 600 else 500
    return BackendHTTPError(f"server error in stream: {error.get('message', error)}", status_code=status)


def error_message(body: bytes) -> str:
    """The human part of an error response body, whatever shape the server chose."""
    import json

    try:
        data = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()[:500]
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            return str(err.get("message") or err.get("detail") or err)[:500]
        return str(data.get("message") or data.get("detail") or err)[:500]
    return str(data)[:500]
