"""The fault scenarios of the error matrix: backends that spend a budget, run late or fail, per strategy.

Shared by tests/strategies/test_error_matrix.py (the scripted backend, every strategy) and the
engine and eval variants. A scenario is a budget and a way to bend every script the backend plays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from paragen.backends.base import SharedRow, SharedSample
from paragen.backends.scripted import Script, ScriptedBackend, arithmetic_responder
from paragen.backends.scripted_shared import ScriptedSharedBackend, ScriptedSharedSession, script_responder
from paragen.config import Budget
from paragen.errors import BackendConnectionError, BackendHTTPError
from paragen.strategy import Strategy, build_strategy
from paragen.types import GenerateRequest
from strategies.llmcompiler import LLMCompiler, ReAct
from strategies.llmcompiler.tools.calculator import calculator

PLAN = '1. calculator("2 + 3")\n2. join()<END_OF_PLAN>'
JOINS = ("Thought: check it once more.\nAction: Replan(check)", "Thought: done.\nAction: Finish(5)")
REACT = 'Thought: add.\nAction: calculator("2 + 3")\nThought: done.\nAction: Finish(5)'
LONG = " ".join(["Let me think about this step by step."] * 40) + " The answer is \\boxed{5}."


@dataclass(frozen=True)
class Scenario:
    name: str
    budget: Budget
    bend: Callable[[Script], Script]


SCENARIOS = {
    # 3 tokens: the first sample to deliver its third token spends the run's budget
    "budget": Scenario("budget", Budget(max_total_tokens=3), lambda s: s),
    # every token 20 ms apart, 400 of them: the deadline passes while samples still run
    "deadline": Scenario(
        "deadline",
        Budget(deadline_s=0.15),
        lambda s: s.model_copy(update={"text": LONG, "token_delay": 0.02}),
    ),
    "fail_all": Scenario("fail_all", Budget(), lambda s: s.model_copy(update={"fail": "http500"})),
    "fail_mid": Scenario(
        "fail_mid", Budget(), lambda s: s.model_copy(update={"fail": "reset", "fail_after": 2})
    ),
}


def base_script() -> Callable[[GenerateRequest, int], Script]:
    """Planner, joiner and ReAct turns for the LLMCompiler pair (the joiner asks for one replan first),
    the arithmetic responder for the rest."""
    joins = iter(JOINS)

    def respond(request: GenerateRequest, index: int) -> Script:
        system = request.messages[0].content if request.messages else ""
        if system.startswith("Make a plan"):
            return Script(text=PLAN)
        if "Replan" in system or "Finish(" in system:
            return Script(text=next(joins, JOINS[-1]))
        return arithmetic_responder(request, index)

    return respond


def scripted(scenario: Scenario) -> ScriptedBackend:
    respond = base_script()
    return ScriptedBackend(lambda request, index: scenario.bend(respond(request, index)))


class FailingSession(ScriptedSharedSession):
    """A shared session whose forward passes fail from pass ``fail_from`` on."""

    def __init__(self, fail_from: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fail_from = fail_from

    async def forward(
        self, rows: Sequence[SharedRow], *, suppress_token_ids: Sequence[int] = (), greedy: bool = False
    ) -> list[SharedSample]:
        if len(self.forwards) >= self.fail_from:
            if self.fail_from == 0:
                raise BackendHTTPError("scripted HTTP 500", status_code=500)
            raise BackendConnectionError("scripted connection reset mid-stream")
        return await super().forward(rows, suppress_token_ids=suppress_token_ids, greedy=greedy)


def shared(scenario: Scenario) -> ScriptedSharedBackend:
    """Hogwild!'s backend: workers say long texts; failures come from the session's forward passes."""
    fail_from = {"fail_all": 0, "fail_mid": 2}.get(scenario.name, 1 << 30)
    delay = 0.02 if scenario.name == "deadline" else 0.0
    texts = [LONG, LONG]

    def session() -> ScriptedSharedSession:
        return FailingSession(fail_from, responder=script_responder(texts), forward_delay=delay)

    respond = base_script()
    return ScriptedSharedBackend(session, lambda request, index: scenario.bend(respond(request, index)))


TOOLBOX = {"calculator": calculator}


def strategy(name: str) -> Strategy:
    """Each built-in strategy, small (n = 4), composites as named: ``pdr+majority``, ``deepprune+llm``."""
    if name == "llmcompiler":
        return LLMCompiler(toolbox=TOOLBOX, max_replans=2)
    if name == "react":
        return ReAct(toolbox=TOOLBOX)
    options: dict[str, dict[str, Any]] = {
        "pdr+majority": {"draft_strategy": "majority"},
        "pdr+ffs": {"draft_strategy": "ffs"},
        "deepprune+llm": {"judge": "llm", "n": 4},
        "deepprune": {"judge": "lexical", "n": 4},
        "adaptive_consistency": {"n": 4},
        "deepconf": {"n": 4},
        "deepconf_online": {"n": 8, "n_init": 2, "batch": 2},
        "ffs_k": {"n": 4, "k": 2},
        "lfs_k": {"n": 4, "k": 2},
        "parallel_probe": {"n": 4, "interval": 8, "stable": 1, "patience": 1, "warmup": 0},
        "heavy": {"reason_k": 4, "summary_k": 2},
        "verify_refine": {"accept_after": 2, "reject_after": 2, "max_iterations": 4},
    }
    base = name.split("+")[0]
    sampled = ("majority", "best_of_n", "ffs", "cisc", "self_certainty", "genselect", "tournament")
    extra = options.get(name, {"n": 4} if base in sampled else {})
    return build_strategy(base, extra)


STRATEGIES = (
    "single", "majority", "best_of_n", "adaptive_consistency", "ffs", "ffs_k", "lfs_k", "pdr", "sr",
    "pdr+majority", "pdr+ffs", "deepprune", "deepprune+llm", "budget_forcing", "nothinking", "deepconf",
    "deepconf_online", "hogwild", "hogwild_text", "llmcompiler", "react", "parallel_probe", "cisc",
    "self_certainty", "forkjoin", "genselect", "tournament", "heavy", "verify_refine",
)  # fmt: skip
