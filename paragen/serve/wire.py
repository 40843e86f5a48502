"""Request bodies of the OpenAI API as paragen reads them, and the ``paragen`` extension field.

Unknown fields are refused (OpenAI does the same: "Unrecognized request argument"), so
a misspelt parameter is a 400, not a silently ignored setting. Fields of the API that
paragen does not use are accepted only at their neutral value (no penalties, no logprobs).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from paragen.config import Budget
from paragen.types import Model, ToolOptions, ToolVoteRule


class ParagenOptions(Model):
    """The extra body field ``paragen``: which strategy, its n and config, and what to send back."""

    strategy: str | None = None
    n: int | None = Field(default=None, ge=1)
    config: dict[str, Any] = Field(default_factory=dict)
    budget: Budget = Field(default_factory=Budget)
    tool_vote: ToolVoteRule | None = None  # default: the server's
    include_result: bool = False  # the whole StrategyResult (every trace) in the answer
    events: bool = True  # stream the run's live events (as SSE comments) before the answer


class StreamOptions(Model):
    include_usage: bool = False
    continuous_usage_stats: bool = False  # vLLM's extension; accepted, usage comes at the end


class TextPart(Model):
    type: Literal["text"]
    text: str


class Message(Model):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]
    name: str | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class _Common(Model):
    """Fields shared by chat and completions requests."""

    model: str = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1)
    max_tokens: int | None = Field(default=None, gt=0)
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None  # not OpenAI's; vLLM, SGLang and llama.cpp take it
    seed: int | None = None
    stop: str | list[str] | None = None
    logprobs: Any = None
    top_logprobs: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    paragen: ParagenOptions = Field(default_factory=ParagenOptions)

    @model_validator(mode="after")
    def _no_unsupported(self) -> _Common:
        if self.logprobs not in (None, False, 0) or self.top_logprobs:
            raise ValueError("logprobs are not supported by paragen serve; leave logprobs unset")
        if self.presence_penalty or self.frequency_penalty or self.logit_bias:
            raise ValueError("presence_penalty, frequency_penalty and logit_bias are not supported")
        return self

    def sampling(self) -> dict[str, Any]:
        """The sampling fields the request set (the rest come from the server's defaults)."""
        fields = {
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "seed": self.seed,
        }
        values: dict[str, Any] = {k: v for k, v in fields.items() if v is not None}
        if self.stop is not None:
            values["stop"] = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        return values

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class ChatRequest(_Common):
    """POST /v1/chat/completions."""

    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, gt=0)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None

    @model_validator(mode="after")
    def _choice_needs_tools(self) -> ChatRequest:
        if not self.tools and self.tool_choice not in (None, "none"):
            raise ValueError("tool_choice needs tools")
        return self

    def tool_options(self) -> ToolOptions | None:
        """The function calling to forward (None without tools)."""
        if not self.tools:
            return None
        return ToolOptions(
            tools=tuple(self.tools),
            tool_choice=self.tool_choice,
            parallel_tool_calls=self.parallel_tool_calls,
        )

    @field_validator("response_format")
    @classmethod
    def _text_only(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and value.get("type") != "text":
            raise ValueError("only response_format {'type': 'text'} is supported")
        return value

    def sampling(self) -> dict[str, Any]:
        values = super().sampling()
        if self.max_completion_tokens is not None:
            values.setdefault("max_tokens", self.max_completion_tokens)
        return values


class CompletionRequest(_Common):
    """POST /v1/completions (one prompt per request)."""

    prompt: str
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

    @model_validator(mode="after")
    def _plain(self) -> CompletionRequest:
        if self.echo or self.suffix or (self.best_of not in (None, 1)):
            raise ValueError("echo, suffix and best_of are not supported; use a strategy instead")
        return self
