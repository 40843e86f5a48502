"""paragen: parallel test-time reasoning for LLMs.

Run many samples (or cooperating workers) of one model at once and turn them into
one better answer, sooner or cheaper than one long sample.
"""

from paragen._api import asolve, solve
from paragen._children import ChildTasks
from paragen._context import RunContext
from paragen._fanout import Fanout
from paragen._live import LiveSample, Monitor
from paragen._shared import RunSharedSession
from paragen.answers import NO_ANSWER, equivalent, extract_answer, majority_vote
from paragen.backends.base import Backend, Capabilities, CompletionStream, SharedRow, SharedSample, generate
from paragen.config import Budget
from paragen.errors import (
    BackendError,
    BudgetExceededError,
    ConfigError,
    ParagenError,
    PluginNotFoundError,
)
from paragen.orchestrator import Orchestrator
from paragen.scoring import Scorer, ScoreRequest, Scorers, StepScores
from paragen.strategy import BaseStrategy, Strategy, StrategyConfig, build_strategy, parallel_samples
from paragen.types import (
    ChatMessage,
    Completion,
    Delta,
    GenerateRequest,
    Problem,
    RunUsage,
    SamplingParams,
    StrategyResult,
    Trace,
    Usage,
)

__version__ = "0.1.0"

__all__ = [
    "NO_ANSWER",
    "Backend",
    "BackendError",
    "BaseStrategy",
    "Budget",
    "BudgetExceededError",
    "Capabilities",
    "ChatMessage",
    "ChildTasks",
    "Completion",
    "CompletionStream",
    "ConfigError",
    "Delta",
    "Fanout",
    "GenerateRequest",
    "LiveSample",
    "Monitor",
    "Orchestrator",
    "ParagenError",
    "PluginNotFoundError",
    "Problem",
    "RunContext",
    "RunSharedSession",
    "RunUsage",
    "SamplingParams",
    "ScoreRequest",
    "Scorer",
    "Scorers",
    "SharedRow",
    "SharedSample",
    "StepScores",
    "Strategy",
    "StrategyConfig",
    "StrategyResult",
    "Trace",
    "Usage",
    "__version__",
    "asolve",
    "build_strategy",
    "equivalent",
    "extract_answer",
    "generate",
    "majority_vote",
    "parallel_samples",
    "solve",
]
