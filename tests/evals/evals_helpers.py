"""Small strategies for the harness tests, registered at run time (the real ones live in strategies/)."""

from __future__ import annotations

import signal
import time

from evals.run.records import EvalRecord, GradeRecord
from paragen._context import RunContext
from paragen.answers import extract_answer, majority_vote
from paragen.prompts import solve_messages
from paragen.registry import STRATEGY_GROUP, register
from paragen.strategy import BaseStrategy, StrategyConfig
from paragen.types import Problem, SamplingParams, StrategyResult, Trace


class OneConfig(StrategyConfig):
    pass


class VoteConfig(StrategyConfig):
    n: int = 4


class OneSample(BaseStrategy[OneConfig]):
    """One sample, its extracted answer."""

    name = "t_single"
    Config = OneConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        trace = await ctx.sample(ctx.request(messages=solve_messages(problem.question)))
        answer = extract_answer(trace.text) if trace.is_ok else None
        return ctx.finish(answer, text=trace.text)


class Vote(BaseStrategy[VoteConfig]):
    """n samples at once, majority vote."""

    name = "t_vote"
    Config = VoteConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        answers: list[str | None] = []
        async with ctx.fanout(ctx.request(messages=solve_messages(problem.question)), n=self.config.n) as fan:
            async for trace in fan:
                trace.answer = extract_answer(trace.text) if trace.is_ok else None
                answers.append(trace.answer)
        return ctx.finish(majority_vote(answers))


class Buggy(BaseStrategy[OneConfig]):
    """One sample, but a bug on the problems named in BUGGY_IDS (raised from a child task)."""

    name = "t_buggy"
    Config = OneConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        trace = await ctx.sample(ctx.request(messages=solve_messages(problem.question)))

        async def check() -> None:
            if problem.id in BUGGY_IDS:
                raise ZeroDivisionError(f"a bug on {problem.id}")

        async with ctx.concurrently() as children:
            children.start(check)
        return ctx.finish(extract_answer(trace.text), text=trace.text)


BUGGY_IDS: set[str] = set()
"""Problems on which t_buggy raises (tests set and clear it)."""


def register_test_strategies() -> None:
    register(STRATEGY_GROUP, "t_single", OneSample)
    register(STRATEGY_GROUP, "t_vote", Vote)
    register(STRATEGY_GROUP, "t_buggy", Buggy)


def spin_forever(prediction: str, gold: str) -> bool:
    """A comparison that never ends in Python code: the grader's timer must stop it."""
    while True:
        time.sleep(0.001)


def ignore_timer_and_hang(prediction: str, gold: str) -> bool:
    """A comparison deaf to the timer (like C code): only the outer limit and a kill stop it."""
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    time.sleep(60)
    return True


def eval_record(pid: str, n: int = 1, *, outcome: str = "correct", settings_id: str = "s0") -> EvalRecord:
    """A small valid record (for tests of the record file itself; sweeps make real ones)."""
    trace = Trace(id=0, text="so \\boxed{2}", answer="2", finish_reason="stop", end=1.0)
    result = StrategyResult(strategy="s", problem_id=pid, answer="2", traces=[trace])
    return EvalRecord(
        run_id="r0",
        settings_id=settings_id,
        task="t",
        grading_mode="auto",
        problem=Problem(id=pid, question="What is 1 + 1?", gold="2"),
        strategy="s",
        n=n,
        strategy_config={"n": n},
        result=result,
        grade=GradeRecord(outcome=outcome, correct=outcome == "correct", answer="2", gold="2"),
        backend="scripted",
        sampling=SamplingParams(),
        seed=0,
        versions={},
        recorded_at=0.0,
    )
