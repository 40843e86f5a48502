"""Verifiers for search strategies: process and outcome reward models, the LLM-as-verifier, and
model-free trace rankers (best-of-n's mean log-probability)."""

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
from paragen.scoring.rankers import TRACE_RANKERS, TraceRanker, load_trace_ranker, mean_logprob
from paragen.scoring.scripted import ScriptedScorer

__all__ = [
    "DEFAULT_STEP_TAG",
    "LLM_VERIFIER",
    "PRM_SYSTEM",
    "TRACE_RANKERS",
    "Aggregate",
    "ScoreRequest",
    "Scorer",
    "ScorerError",
    "ScorerKind",
    "Scorers",
    "ScriptedScorer",
    "StepScores",
    "TraceRanker",
    "Weighting",
    "aggregate",
    "build_scorer",
    "check_scorer_spec",
    "load_trace_ranker",
    "mean_logprob",
    "parse_scorer_spec",
    "prm_messages",
    "weighted_answer",
]
