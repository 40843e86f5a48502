"""Run-level configuration: budgets and backend specs."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from pydantic import Field, model_validator

from paragen.errors import ConfigError
from paragen.types import Model


class RepetitionDetection(Model):
    """vLLM's ``repetition_detection`` (a backend option of ``openai`` and ``vllm``): a sample whose
    last ``min_count`` runs of some n-gram of ``min_pattern_size``..``max_pattern_size`` tokens are
    equal is stopped by the server, with finish reason "repetition"."""

    max_pattern_size: int = Field(gt=0)
    min_pattern_size: int = Field(default=1, gt=0)
    min_count: int = Field(ge=2)

    @model_validator(mode="after")
    def _ordered(self) -> RepetitionDetection:
        if self.min_pattern_size > self.max_pattern_size:
            raise ValueError("min_pattern_size must not exceed max_pattern_size")
        return self


class Budget(Model):
    """Limits of one run. ``None`` means unlimited.

    ``max_total_tokens`` caps every generated token of the run (cancelled ones too):
    when it is reached, running samples are cancelled with reason "budget" and new
    requests fail with BudgetExceededError. ``max_sequential_tokens`` caps each
    request's ``max_tokens`` so no chain of calls can exceed it. ``deadline_s``
    bounds the wall time of the run.
    """

    max_total_tokens: int | None = Field(default=None, gt=0)
    max_sequential_tokens: int | None = Field(default=None, gt=0)
    deadline_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)


def parse_backend_spec(spec: str) -> tuple[str, str | None]:
    """Split a ``kind[:target]`` spec: ``openai:http://host:8000/v1``, ``engine``, ``engine:m.gguf``."""
    spec = spec.strip()
    if not spec:
        raise ConfigError("empty backend spec", hint="use e.g. 'engine' or 'openai:http://localhost:8000/v1'")
    kind, sep, target = spec.partition(":")
    if not kind.isidentifier():
        shown = spec_without_credentials(spec)
        raise ConfigError(f"bad backend spec {shown!r}", hint="the form is KIND[:TARGET], e.g. 'openai:URL'")
    return kind, (target or None) if sep else None


def split_credentials(target: str | None) -> tuple[str | None, str | None]:
    """A URL target without its userinfo, and the secret it held (the password, else the user name).

    ``http://user:KEY@host/v1`` -> (``http://host/v1``, ``KEY``): the URL may then be shown and
    recorded, and the key travels only as the backend's credentials.
    """
    if target is None or "://" not in target:
        return target, None
    scheme, _, rest = target.partition("://")
    authority, slash, path = rest.partition("/")
    userinfo, at, host = authority.rpartition("@")
    if not at:
        return target, None
    user, _, password = userinfo.partition(":")
    secret = unquote(password or user)
    return f"{scheme}://{host}{slash}{path}", secret or None


def spec_without_credentials(spec: str) -> str:
    """A ``kind[:target]`` spec as it may be shown and recorded: no userinfo in its URL."""
    kind, sep, target = spec.partition(":")
    return f"{kind}{sep}{split_credentials(target)[0] if sep else ''}"


def move_url_credentials(values: Any) -> Any:
    """Backend options with credentials moved out of ``base_url``/``base_urls`` into ``api_key``.

    For a pydantic before-validator: the URLs left behind may be shown and recorded.
    """
    if not isinstance(values, dict):
        return values
    values = dict(values)
    found: set[str] = set()
    if isinstance(values.get("base_url"), str):
        values["base_url"], secret = split_credentials(values["base_url"])
        found.update([secret] if secret else [])
    if isinstance(values.get("base_urls"), list | tuple):
        urls = [split_credentials(u) if isinstance(u, str) else (u, None) for u in values["base_urls"]]
        values["base_urls"] = [url for url, _ in urls]
        found.update(secret for _, secret in urls if secret)
    if len(found) > 1:
        raise ValueError("the URLs hold different credentials; one backend sends one API key")
    if found:
        if values.get("api_key") is not None:
            raise ValueError("an API key is given both in the URL and as api_key; give one")
        values["api_key"] = found.pop()
    return values
