"""The OpenAI backend's options and what its probe learns of a server (shared by the backend
and its stream module, which must not import each other)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from paragen.backends.openai_wire import THINKING_BUDGET_FIELD, ServerKind
from paragen.backends.routing import Gateway
from paragen.config import RepetitionDetection, move_url_credentials
from paragen.errors import ConfigError
from paragen.reasoning import ThinkFormat
from paragen.types import Model


class ThinkingOptions(Model):
    """How the model marks its thinking, and what the servers do about thinking."""

    # How the model marks its thinking in its text where the server does not send it apart
    # (see paragen.reasoning); "none": the whole text is the answer.
    format: ThinkFormat = "think"
    # The server enforces per-request thinking budgets (vLLM started with --reasoning-parser or
    # --reasoning-config, SGLang with --enable-strict-thinking, llama-server): strategies then ask
    # it for theirs (capabilities.thinking_budget) instead of forcing the end of thinking themselves.
    budgets: bool = False
    # A thinking budget sent on every request that sets none, in the server's own field
    # (THINKING_BUDGET_FIELD); setting it says the server enforces budgets.
    token_budget: int | None = Field(default=None, ge=0)
    # A continued reply that holds thinking goes to vLLM as a raw completion of the server-rendered
    # conversation plus the reply (paragen.backends.openai_render), not through the chat template.
    raw_continuation: bool = True

    @property
    def enforces_budgets(self) -> bool:
        """The servers take a thinking budget per request (see ``budgets``)."""
        return self.budgets or self.token_budget is not None


# The flat option names of the thinking options (as the command line and docs write them).
_FLAT_THINKING = {
    "thinking_budgets": "budgets",
    "thinking_token_budget": "token_budget",
    "raw_continuation": "raw_continuation",
}


def _group_thinking(values: Any) -> Any:
    """``thinking=FORMAT`` and the flat names (``thinking_budgets=true``) as the ``thinking`` sub-config."""
    if not isinstance(values, dict):
        return values
    given = values.get("thinking")
    flat = {_FLAT_THINKING[k]: values[k] for k in _FLAT_THINKING if k in values}
    if isinstance(given, str):
        given = {"format": given}
    if flat:
        if isinstance(given, ThinkingOptions):
            given = given.model_dump(exclude_unset=True)
        given = given or {}
        twice = sorted(set(flat) & set(given)) if isinstance(given, dict) else []
        if twice:
            raise ValueError(f"the thinking option {twice[0]!r} is given twice")
        given = {**given, **flat} if isinstance(given, dict) else given
    if "thinking" not in values and not flat:
        return values
    return {**{k: v for k, v in values.items() if k not in _FLAT_THINKING}, "thinking": given}


class OpenAIConfig(Model):
    """Options of :class:`OpenAIBackend` (``--backend openai:URL`` gives ``base_url``)."""

    base_url: str
    base_urls: tuple[str, ...] = ()  # more replicas of the same model: a pool
    model: str | None = None  # None: the first model the server lists
    api_key: SecretStr | None = None
    api_key_env: str | None = "OPENAI_API_KEY"
    endpoint: Literal["auto", "completions", "chat"] = "auto"
    server: Literal["auto", "vllm", "sglang", "llama_cpp", "openai"] = "auto"
    connect_timeout: float = Field(default=10.0, gt=0)
    read_timeout: float | None = Field(default=600.0, gt=0)  # longest silence between chunks
    max_retries: int = Field(default=3, ge=0)
    backoff: float = Field(default=0.5, ge=0)
    max_backoff: float = Field(default=30.0, ge=0)
    native_n: bool | None = None  # None: decided by the probe
    continuous_usage: bool | None = None  # None: on for vLLM
    max_outstanding: int | None = Field(default=None, gt=0)  # per replica, for affinity routing
    affinity_slack: int = Field(default=32, ge=0)
    max_connections: int = Field(default=1024, gt=0)
    # Hedged requests over the pool (off: None): no token within this many seconds (0: at once)
    # sends the request to a second replica too; the first to stream a token wins.
    hedge_after_s: float | None = Field(default=None, ge=0)
    # A gateway in front of the servers (paragen.backends.routing): every request of a problem
    # carries the problem's routing key in the header this gateway pins by. None: no header.
    gateway: Gateway | None = None
    # The servers' own scheduling and stopping knobs, sent on every request (checked against the
    # server kind when the backend opens): vLLM's and SGLang's request priority (each needs its
    # server's priority scheduling on), and vLLM's n-gram repetition detection.
    priority: int | None = None
    repetition_detection: RepetitionDetection | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)  # server extras: ignore_eos, min_p, ...
    # How the model thinks and what the servers do about it (see ThinkingOptions). On the command
    # line a format alone (thinking=think_open) or the flat names (thinking_budgets=true, ...) do.
    thinking: ThinkingOptions = Field(default_factory=ThinkingOptions)

    @model_validator(mode="before")
    @classmethod
    def _credentials_out_of_urls(cls, values: Any) -> Any:
        return move_url_credentials(values)  # a URL is shown and recorded; a key never is

    @model_validator(mode="before")
    @classmethod
    def _thinking_options(cls, values: Any) -> Any:
        return _group_thinking(values)

    @field_validator("base_url", "base_urls")
    @classmethod
    def _http_urls(cls, value: Any) -> Any:
        urls = [value] if isinstance(value, str) else list(value)
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"{url!r} is not an http(s) URL (e.g. http://localhost:8000/v1)")
        return value.rstrip("/") if isinstance(value, str) else tuple(u.rstrip("/") for u in value)

    def server_knobs(self) -> dict[str, Any]:
        """The body fields of the knobs set (checked against each server by ``check_knobs``)."""
        fields: dict[str, Any] = {}
        if self.priority is not None:
            fields["priority"] = self.priority
        if self.repetition_detection is not None:
            fields["repetition_detection"] = self.repetition_detection.model_dump()
        return fields

    def check_knobs(self, kind: ServerKind, url: str) -> None:
        """A ConfigError where a knob is set that a server of ``kind`` would not take."""
        if self.repetition_detection is not None and kind != "vllm":
            raise ConfigError(
                f"repetition_detection is vLLM's, and {url} is a {kind} server",
                hint="drop the option, or set server='vllm' if it is vLLM behind a proxy",
            )
        if self.thinking.enforces_budgets and kind not in THINKING_BUDGET_FIELD:
            raise ConfigError(
                f"{url} is a {kind} server, which takes no thinking budget",
                hint="drop thinking_budgets and thinking_token_budget, or set server= to the kind it is",
            )
        if self.priority is not None and kind not in ("vllm", "sglang"):
            raise ConfigError(
                f"priority is taken by vLLM and SGLang, and {url} is a {kind} server",
                hint="drop the option, or set server= to the kind it is",
            )

    @property
    def enforces_thinking_budgets(self) -> bool:
        """The servers take a thinking budget per request (``ThinkingOptions.enforces_budgets``)."""
        return self.thinking.enforces_budgets

    def resolved_key(self) -> str | None:
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        return os.environ.get(self.api_key_env) if self.api_key_env else None


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What the probe learnt about one replica."""

    kind: ServerKind
    model: str
    native_n: bool
    continuous_usage: bool
    listed: dict[str, Any] | None = None  # the model's entry in GET /models, as the server lists it
    context_length: int | None = None  # tokens per sequence, where the server says (vLLM, llama-server)
    # Continues a prefilled assistant reply on the chat endpoint: vLLM and SGLang when asked
    # (continue_final_message), llama-server whenever the last message is the assistant's.
    continues_replies: bool = False
