"""Verifiers for search strategies: process and outcome reward models and the LLM-as-verifier."""

from paragen.scoring.aggregate import Aggregate, Weighting, aggregate, weighted_answer
from paragen.scoring.base import (
    DEFAULT_STEP_TAG,
    PRM_SYSTEM,
    Scorer,
    ScoreRequest,
    ScorerError,
    ScorerKind,
    StepScores,
    parse_scorer_spec,
    prm_messages,
)
from paragen.scoring.pool import LLM_VERIFIER, Scorers, build_scorer, check_scorer_spec
from paragen.scoring.scripted import ScriptedScorer

__all__ = [
    "DEFAULT_STEP_TAG",
    "LLM_VERIFIER",
    "PRM_SYSTEM",
    "Aggregate",
    "ScoreRequest",
    "Scorer",
    "ScorerError",
    "ScorerKind",
    "Scorers",
    "ScriptedScorer",
    "StepScores",
    "Weighting",
    "aggregate",
    "build_scorer",
    "check_scorer_spec",
    "parse_scorer_spec",
    "prm_messages",
    "weighted_answer",
]
