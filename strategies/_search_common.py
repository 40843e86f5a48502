"""What the verifier-guided searches share: config fields, paths, step scores' aggregation, the weighted vote.

Weighted best-of-N, beam search, DVTS and particle filtering all end the same way (Snell et al.
2024; HF search-and-learn): each candidate solution gets one value from its step scores
(``last``, ``min`` or ``prod``), and the answer with the largest sum of values wins (``sum``),
or the single best-valued solution's answer (``max``: plain best-of-N).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import Field, field_validator, model_validator

# `scoring.aggregate` by attribute: the name is also a submodule's, and strategies import no submodule.
from paragen import RunContext, StrategyConfig, scoring
from paragen.answers import answer_key
from paragen.scoring import LLM_VERIFIER, Aggregate, Weighting, check_scorer_spec, weighted_answer
from paragen.types import StrategyResult, TokenCount


class VerifierFields(StrategyConfig):
    """The scorer and how its step scores become one value per solution, and values one answer."""

    verifier: str = Field(default=LLM_VERIFIER, description="'llm' or a scorer spec (engine:PATH, ...)")
    aggregate: Aggregate = Field(
        default="last", description="step scores -> one value (search-and-learn: last)"
    )
    weighting: Weighting = Field(default="sum", description="sum = weighted best-of-N, max = plain best-of-N")
    delimiter: str = Field(default="\n\n", min_length=1, description="what separates steps")
    temperature: float | None = Field(default=0.8, ge=0, description="search-and-learn: 0.8 (None = run's)")
    top_p: float | None = Field(default=None, gt=0, le=1, description="None = the run's")

    @field_validator("verifier")
    @classmethod
    def _known_scorer(cls, value: str) -> str:
        return check_scorer_spec(value)


class StepFields(VerifierFields):
    """Fields of the step-by-step searches (beam search, DVTS, particle filtering)."""

    max_depth: int = Field(default=40, ge=1, le=1000, description="steps at most (search-and-learn: 40)")
    step_max_tokens: TokenCount = Field(
        default=512, description="tokens one step may take (max_tokens bounds all steps of a solution)"
    )
    finish_at_limit: bool = Field(
        default=True, description="the last depth writes to the end (no delimiter stop), as search-and-learn"
    )


class TreeFields(StepFields):
    """N beams in all, M expansions of each (beam search keeps N/M; DVTS grows N/M subtrees)."""

    n: int = Field(default=16, ge=1, le=4096, description="beams N (the sample count of a depth)")
    m: int = Field(default=4, ge=1, le=1024, description="expansions M per beam")

    @model_validator(mode="after")
    def _m_divides_n(self) -> TreeFields:
        if self.n % self.m:
            raise ValueError(f"n ({self.n}) must be a multiple of m ({self.m})")
        return self


def split_steps(text: str, delimiter: str) -> tuple[str, ...]:
    """A finished solution's steps for a PRM: its non-blank pieces between delimiters."""
    steps = tuple(piece.strip() for piece in text.split(delimiter) if piece.strip())
    return steps or (text,)


@dataclass(frozen=True, slots=True)
class Path:
    """A (partial) solution: its steps, the sample trace of each, and the latest step scores."""

    steps: tuple[str, ...] = ()
    trace_ids: tuple[int, ...] = ()
    scores: tuple[float, ...] = ()
    finished: bool = False
    answer: str | None = None
    tokens: int = 0  # the steps' completion tokens together: a run's max_tokens bounds them

    def text(self, delimiter: str) -> str:
        return delimiter.join(self.steps)

    def value(self, how: Aggregate) -> float:
        return scoring.aggregate(self.scores, how)

    @property
    def last_id(self) -> int:
        return self.trace_ids[-1] if self.trace_ids else -1


def answer_weight(paths: Sequence[Path], answer: str, cfg: VerifierFields) -> float:
    """What ``answer`` weighs: its paths' values summed (``sum``) or the best of them (``max``)."""
    key = answer_key(answer)
    values = [p.value(cfg.aggregate) for p in paths if p.answer is not None and answer_key(p.answer) == key]
    return sum(values) if cfg.weighting == "sum" else max(values)


def weighted_finish(
    ctx: RunContext,
    paths: Sequence[Path],
    cfg: VerifierFields,
    *,
    metrics: dict[str, float] | None = None,
) -> StrategyResult:
    """The weighted vote over ``paths`` (ties to the first in order); text = the winner's best path."""
    values = [p.value(cfg.aggregate) for p in paths]
    winner = weighted_answer([p.answer for p in paths], values, cfg.weighting)
    distinct = {answer_key(p.answer) for p in paths if p.answer is not None}
    found = {"candidates": float(len(paths)), "distinct_answers": float(len(distinct)), **(metrics or {})}
    if winner is None:
        return ctx.finish(None, metrics=found)
    key = answer_key(winner)
    voters = [i for i, p in enumerate(paths) if p.answer is not None and answer_key(p.answer) == key]
    best = paths[max(voters, key=lambda i: (values[i], -i))]
    found["winner_weight"] = answer_weight(paths, winner, cfg)
    found["best_score"] = best.value(cfg.aggregate)
    ctx.emit("search: answer chosen", winner=winner, weight=found["winner_weight"], path=list(best.trace_ids))
    return ctx.finish(best.answer, text=best.text(cfg.delimiter), metrics=found)


__all__ = [
    "Aggregate",
    "Path",
    "StepFields",
    "TreeFields",
    "VerifierFields",
    "Weighting",
    "answer_weight",
    "split_steps",
    "weighted_finish",
]
