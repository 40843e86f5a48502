"""Run-level configuration: budgets and backend specs."""

from __future__ import annotations

from pydantic import Field

from paragen.errors import ConfigError
from paragen.types import Model


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
    deadline_s: float | None = Field(default=None, gt=0)


def parse_backend_spec(spec: str) -> tuple[str, str | None]:
    """Split a ``kind[:target]`` spec: ``openai:http://host:8000/v1``, ``engine``, ``engine:m.gguf``."""
    spec = spec.strip()
    if not spec:
        raise ConfigError("empty backend spec", hint="use e.g. 'engine' or 'openai:http://localhost:8000/v1'")
    kind, sep, target = spec.partition(":")
    if not kind.isidentifier():
        raise ConfigError(f"bad backend spec {spec!r}", hint="the form is KIND[:TARGET], e.g. 'openai:URL'")
    return kind, (target or None) if sep else None
