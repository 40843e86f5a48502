"""Settings of one ``paragen serve`` process."""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator

from paragen.config import Budget
from paragen.scoring.pool import check_scorer_spec
from paragen.types import Model, SamplingParams, ToolVoteRule


class ServeConfig(Model):
    """What the server allows and assumes; the CLI flags of ``paragen serve`` fill it in.

    ``max_runs`` bounds the runs in flight across all clients and ``max_samples_per_request``
    the samples one request may ask for (strategy n times the OpenAI ``n`` choices); past the first
    the server answers 429 with ``Retry-After: retry_after_s``, past the second 400 (it can never
    be served). ``defaults`` are the
    sampling parameters a request does not set. ``model_names`` are the names the backend's
    model is served under (the first is listed first in /v1/models). ``tool_vote`` is the rule
    a majority vote over tool calls uses when a request does not name one (strategies/tool_vote.py).
    ``scorers`` are the reward models a request's strategy may name as its ``verifier`` (loaded on
    first use and kept); the LLM-as-verifier (``llm``) needs none, and no other spec is opened.
    """

    model_names: tuple[str, ...] = Field(min_length=1)
    api_key: SecretStr | None = None
    max_runs: int = Field(default=256, gt=0)
    max_samples_per_request: int = Field(default=64, gt=0)
    max_prompt_tokens: int = Field(default=16384, gt=0)
    max_body_bytes: int = Field(default=8 * 2**20, gt=0)
    retry_after_s: int = Field(default=1, ge=0)
    defaults: SamplingParams = Field(default_factory=SamplingParams)
    budget: Budget = Field(default_factory=Budget)
    tool_vote: ToolVoteRule = "hierarchical"  # majority over tool calls
    scorers: tuple[str, ...] = ()

    @field_validator("model_names")
    @classmethod
    def _nameable(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        # A name a request cannot write would be listed in /v1/models and never served.
        for name in names:
            if not name.strip() or name != name.strip():
                raise ValueError(f"{name!r} is not a model name a request can use (empty or blank at an end)")
        return names

    @field_validator("scorers")
    @classmethod
    def _known_scorers(cls, specs: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(check_scorer_spec(spec) for spec in specs)
