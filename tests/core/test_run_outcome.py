"""How a run ends when something raises inside it: classified into the result, or propagated as itself.

A spent budget inside a composite strategy (PDR with majority drafts, DeepPrune with the llm judge)
must end the run as a result, not leave its task groups as an ExceptionGroup escaping the orchestrator.
"""

from __future__ import annotations

import anyio
import pytest

from paragen import Orchestrator, Problem, RunContext
from paragen._outcome import classify, leaves
from paragen.backends.scripted import ScriptedBackend
from paragen.config import Budget
from paragen.errors import BackendHTTPError, BudgetExceededError
from paragen.strategy import BaseStrategy, StrategyConfig, build_strategy
from paragen.types import StrategyResult

pytestmark = pytest.mark.anyio

PROBLEM = Problem(id="p", question="What is 2 + 3?", gold="5")


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("pdr", {"draft_strategy": "majority"}),
        ("deepprune", {"judge": "llm", "n": 4}),
    ],
)
async def test_a_budget_spent_inside_a_composite_ends_the_run_as_budget(
    name: str, options: dict[str, object]
) -> None:
    orch = Orchestrator(ScriptedBackend(), budget=Budget(max_total_tokens=20))
    result = await orch.run(build_strategy(name, options), PROBLEM)
    assert result.stop_reason == "budget" and result.answer is None
    assert result.traces and result.usage.total_tokens >= 20  # the traces so far, with their accounting
    assert result.error is not None and "BudgetExceededError" in result.error


class _Bug(RuntimeError):
    pass


class BuggyConfig(StrategyConfig):
    where: str = "body"  # body | group | beside_budget


class Buggy(BaseStrategy[BuggyConfig]):
    """A plugin with a bug: in its own body, or in one child of a task group (beside a spent budget)."""

    name = "buggy"
    Config = BuggyConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        if self.config.where == "body":
            raise _Bug("in the body")

        async def bug() -> None:
            try:
                await anyio.sleep(0.01 if self.config.where == "group" else 10)
            finally:  # beside a budget: a bug in cleanup, raised as the spent budget cancels the group
                raise _Bug("in a child")

        async def spend() -> None:
            await ctx.sample(ctx.request(prompt=problem.question))  # spends the budget ...
            await ctx.sample(ctx.request(prompt=problem.question))  # ... so this one is refused

        async with ctx.concurrently() as children:
            children.start(bug)
            if self.config.where == "beside_budget":
                children.start(spend)
        return ctx.finish(None)


@pytest.mark.parametrize("where", ["body", "group", "beside_budget"])
async def test_a_strategys_bug_propagates_as_itself(where: str) -> None:
    orch = Orchestrator(ScriptedBackend(), budget=Budget(max_total_tokens=5))
    with pytest.raises(_Bug) as caught:
        await orch.run(Buggy(where=where), PROBLEM)
    assert type(caught.value) is _Bug  # not an ExceptionGroup: the bug wins over the spent budget
    frames = [entry.name for entry in caught.traceback]
    assert ("run" if where == "body" else "bug") in frames  # its own traceback, down to where it was raised


async def test_run_many_raises_a_bug_as_itself() -> None:
    orch = Orchestrator(ScriptedBackend())
    with pytest.raises(_Bug):
        await orch.run_many(Buggy(where="group"), [PROBLEM, PROBLEM.model_copy(update={"id": "q"})])


async def test_cancellation_from_outside_propagates() -> None:
    orch = Orchestrator(ScriptedBackend())
    with anyio.move_on_after(0.005) as scope:
        await orch.run(build_strategy("pdr", {"draft_strategy": "majority"}), PROBLEM)
    assert scope.cancelled_caught


def test_classify_reads_groups_at_any_depth() -> None:
    budget = BudgetExceededError("spent", kind="total_tokens")
    backend = BackendHTTPError("down", status_code=500)
    nested = ExceptionGroup("outer", [ExceptionGroup("inner", [backend, ExceptionGroup("deep", [budget])])])
    assert leaves(nested) == [backend, budget]
    assert classify(nested) == ("budget", budget.one_line())  # a spent budget outranks the errors it caused
    assert classify(ExceptionGroup("g", [backend])) == ("error", backend.one_line())
    bug = KeyError("x")
    with pytest.raises(KeyError) as caught:
        classify(ExceptionGroup("g", [budget, ExceptionGroup("h", [bug, ValueError("y")])]))
    assert caught.value is bug and "ValueError: y" in " ".join(getattr(bug, "__notes__", []))
