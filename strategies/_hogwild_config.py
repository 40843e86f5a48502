"""``hogwild``'s config, and what its ``reference`` protocol sets (docs/hogwild.md, "Protocols")."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from paragen import StrategyConfig
from paragen.types import TokenCount
from strategies._hogwild_prompts import NAMES, HogwildPrompts
from strategies._hogwild_reference import REFERENCE_PROMPTS
from strategies._hogwild_rules import AnswerRule

Layout = Literal["contiguous", "interleaved", "combined"]
ProtocolPreset = Literal["paragen", "reference"]
StepRuleName = Literal["paragen", "reference"]

# What the ``reference`` protocol sets, unless the config sets a field itself.
REFERENCE_DEFAULTS: dict[str, Any] = {
    "prompts": REFERENCE_PROMPTS,
    "nudge_unit": "tokens",
    "finisher_mode": "reencode",
    "answer_anywhere": True,
    "answer_rule": "number",
    "step_rule": "reference",
}


class HogwildConfig(StrategyConfig):
    workers: int = Field(default=2, ge=1, le=len(NAMES), description="workers writing at once")
    layout: Layout = Field(default="combined", description="how each worker's view is built")
    protocol: ProtocolPreset = Field(
        default="paragen",
        description="preset: 'reference' follows the reference code (its prompt structure and view "
        "headers, step and answer rules, nudge count, re-encoded finisher, answer anywhere)",
    )
    nudge_every: int = Field(
        default=256, ge=0, description="passes (or tokens) between collaboration nudges (0: never)"
    )
    nudge_unit: Literal["passes", "tokens"] = Field(
        default="passes",
        description="'passes': a nudge once nudge_every forward passes went by; 'tokens': once more "
        "than nudge_every tokens were written into the workers' steps (samples, headers, nudges)",
    )
    finisher_mode: Literal["view", "reencode"] = Field(
        default="view",
        description="'view': continue the last worker's view; 'reencode': the flattened text, fresh request",
    )
    answer_anywhere: bool = Field(
        default=False, description="at the budget's end, a boxed answer in any worker's text is the answer"
    )
    answer_rule: AnswerRule = Field(
        default="boxed",
        description="'boxed': any \\boxed{} ends the run and answers; 'number': only a box that "
        "parses as a number, the last one in the whole text answering",
    )
    step_rule: StepRuleName = Field(
        default="paragen",
        description="what ends a step: 'paragen' (no step end inside a code block) or 'reference' "
        "(its sixteen sentence ends, code blocks too, a token holding the whole blank line)",
    )
    max_forward_passes: int | None = Field(
        default=None, gt=0, description="budget in sequential forward passes (None: the run's max_tokens)"
    )
    finisher_tokens: TokenCount = Field(default=16, description="greedy tokens the finisher may write")
    stop_at_answer: bool = Field(default=True, description="end once a finished step holds a boxed answer")
    temperature: float | None = Field(default=None, ge=0, description="override the run's temperature")
    prompts: HogwildPrompts = Field(default_factory=HogwildPrompts)

    @model_validator(mode="before")
    @classmethod
    def _apply_protocol(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("protocol") == "reference":
            return {**REFERENCE_DEFAULTS, **data}
        return data


__all__ = ["REFERENCE_DEFAULTS", "HogwildConfig", "Layout", "ProtocolPreset", "StepRuleName"]
