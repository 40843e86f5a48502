"""The scorer contract: a verifier that rates the steps of a solution (a PRM) or a whole answer (an ORM).

    scores = await scorer.score(ScoreRequest(question="...", steps=("step 1", "step 2")))
    scores.steps   # a PRM: one probability per step; an ORM: one score for the whole solution

Scorers are a second kind of backend. Strategies never hold one: they call ``ctx.score(...)``,
which records each call as a trace of kind "score" (its tokens counted apart from generated
ones, its time on the run's clock) and cancels it with the run. Leaving ``score()`` by
cancellation must free the work, as a backend's stream does (close the HTTP response, drop
the engine's request).

A PRM's input follows Qwen2.5-Math-PRM's convention (:func:`prm_messages`): the question in
the user turn and the steps as the assistant's reply, each step followed by a step tag
(``<extra_0>``); the score of a step is the probability of the "positive" class at its tag.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from paragen.errors import BackendError, ConfigError
from paragen.types import CountSource

ScorerKind = Literal["prm", "orm"]

DEFAULT_STEP_TAG = "<extra_0>"
# Qwen2.5-Math-PRM's system prompt; a PRM scores best with the prompt it was trained on.
PRM_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."


class ScorerError(BackendError):
    """A scorer failed (server down, malformed reply, a model without the head it needs): a run that
    meets it ends as a backend failure ("error"), never as a bug."""


class ScoreRequest(BaseModel):
    """What to rate: a question and the solution's steps so far (the last one is the newest)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    question: str
    steps: tuple[str, ...] = Field(min_length=1)


class StepScores(BaseModel):
    """A scorer's verdict and what it cost.

    ``steps`` holds one score per step for a PRM; one score (of the whole solution, i.e. its
    last step) for an ORM or the LLM-as-verifier. Scores are probabilities of "correct" in
    [0, 1] for the built-in scorers; an ORM's raw reward may be any real number.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: tuple[float, ...] = Field(min_length=1)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    count_source: CountSource = "none"

    @property
    def last(self) -> float:
        return self.steps[-1]


@runtime_checkable
class Scorer(Protocol):
    """A source of scores. ``open()`` (optional, idempotent) loads the model or probes the server."""

    name: str

    @property
    def kind(self) -> ScorerKind: ...

    async def score(self, request: ScoreRequest) -> StepScores: ...

    async def aclose(self) -> None: ...


def prm_messages(
    question: str, steps: Sequence[str], step_tag: str = DEFAULT_STEP_TAG
) -> list[dict[str, str]]:
    """The chat a PRM scores: render it with the chat template, no generation prompt.

    Each step is stripped and followed by ``step_tag``; a step that already contains the tag
    would shift every later score, so it is refused.
    """
    cleaned = [s.strip() for s in steps]
    if any(step_tag in s for s in cleaned):
        raise ScorerError(f"a step contains the PRM's step tag {step_tag!r}")
    reply = "".join(f"{s}{step_tag}" for s in cleaned)
    return [
        {"role": "system", "content": PRM_SYSTEM},
        {"role": "user", "content": question},
        {"role": "assistant", "content": reply},
    ]


def orm_messages(question: str, steps: Sequence[str]) -> list[dict[str, str]]:
    """The chat an ORM rates: the question, then the whole solution as the reply (its steps joined
    by blank lines, as the LLM-as-verifier joins them)."""
    return [
        {"role": "user", "content": question},
        {"role": "assistant", "content": "\n\n".join(s.strip() for s in steps)},
    ]


def reward_messages(request: ScoreRequest, kind: ScorerKind, step_tag: str) -> list[dict[str, str]]:
    """The chat a reward model of ``kind`` rates: :func:`prm_messages` or :func:`orm_messages`."""
    if kind == "orm":
        return orm_messages(request.question, request.steps)
    return prm_messages(request.question, request.steps, step_tag)


def parse_scorer_spec(spec: str) -> tuple[str, str | None, dict[str, str]]:
    """``KIND[:TARGET][?key=value&...]`` -> (kind, target, options).

    ``llm`` (the generator as its own verifier), ``engine:PATH``, ``vllm:PATH``,
    ``vllm-server:URL``; options such as ``step_tag`` or ``model`` go after a ``?``.
    """
    head, _, query = spec.strip().partition("?")
    kind, sep, target = head.partition(":")
    if not kind:
        raise ConfigError(f"empty scorer spec {spec!r}", hint=SPEC_HINT)
    options: dict[str, str] = {}
    for part in filter(None, query.split("&")):
        key, eq, value = part.partition("=")
        if not eq or not key:
            raise ConfigError(f"scorer option {part!r} is not key=value", hint=SPEC_HINT)
        options[key] = value
    return kind, (target if sep else None), options


SPEC_HINT = (
    "scorers: llm, engine:PATH, vllm:PATH, vllm-server:URL, scripted:FILE.json, custom:NAME"
    " (options after '?', e.g. ?step_tag=<extra_0>)"
)
