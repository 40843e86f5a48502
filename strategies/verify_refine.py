"""Verify-and-refine for proof-grade math: Huang & Yang (arXiv 2507.15855), and DeepSeekMath-V2's
pool scaffold as MathArena runs it (arXiv 2511.22570).

``huang_yang`` (and ``selfcheck``, the same loop with MathArena's numbers) follows ``agent()`` and
``init_explorations()`` of lyang36/IMO25 ``code/agent.py``: a solution is written, then improved
once in the same chat, then verified; each verification is two calls, a grader's report that sorts
findings into critical errors and justification gaps, and a short call reading that report for a
yes or no. Each of at most ``max_iterations`` iterations first corrects the solution from the
report's summary when the last verdict failed (the solver's chat: problem, its solution, the
report), then verifies the current solution again. The counters are the authors' (see
``strategies._verify_rules.Streak``): 5 consecutive passing verdicts accept (the initial one
counts), a passing verdict clears the failures, and 10 corrections in a row each followed by a
failing verdict reject. A run that is not accepted answers nothing (the authors return None; the
next of their ``--max_runs`` restarts from scratch, which is a rerun here) unless
``return_unverified``. The "is the solution claimed complete?" check exists in the authors' code
(``check_if_solution_claimed_complete``) but every call of it is commented out, so there is none.

MathArena's ``SelfcheckAgent`` (``src/matharena/solvers/selfcheck_agent.py``) reorders this loop
(the verification inside the iteration, counters from 0, its first verdict never a pass); the
``selfcheck`` preset takes its numbers (2, 4, 10) with the authors' order, not that reordering.

``deepseek_math`` follows ``DeepSeekMathAgent.solve`` (MathArena
``src/matharena/solvers/deepseek_math.py``): see :mod:`strategies._verify_pool`.

Every verifier call is a trace of kind "score" (see :mod:`strategies._verify_calls` for why):
``verify_tokens`` caps each, ``verify_budget`` caps their sum (prompt and completion, as
``usage.score_tokens`` counts); once it is spent no verification starts and the run stops with
the rule "verify_budget". The rule that ended the run is ``details["stop_rule"]``, and a metric
``stop_<rule>`` = 1.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from pydantic import Field, model_validator

from paragen import BaseStrategy, RunContext, StrategyConfig
from paragen.answers import ExtractMode
from paragen.types import Problem, StrategyResult, TokenCount, Trace
from strategies import _verify_prompts as prompts
from strategies._toolkit import annotate
from strategies._verify_calls import Calls, finish
from strategies._verify_pool import run_pool
from strategies._verify_rules import (
    PRESETS,
    LoopRules,
    PoolRules,
    Scaffold,
    StopRule,
    Streak,
    bug_report,
    detailed_solution,
    says_yes,
)

_LOOP_FIELDS = ("accept_after", "reject_after")
_POOL_FIELDS = ("pool_size", "verifications", "verifications_per_refinement")


class VerifyRefineConfig(StrategyConfig):
    scaffold: Scaffold = Field(
        default="huang_yang",
        description="preset: huang_yang (5/10/30), selfcheck (2/4/10), deepseek_math (pool)",
    )
    accept_after: int | None = Field(default=None, ge=1, le=1000, description="passing verdicts in a row")
    reject_after: int | None = Field(default=None, ge=1, le=1000, description="failed corrections in a row")
    max_iterations: int | None = Field(default=None, ge=0, le=1000)
    pool_size: int | None = Field(default=None, ge=1, le=1024, description="deepseek_math: proofs per wave")
    verifications: int | None = Field(
        default=None, ge=1, le=1024, description="deepseek_math: grades per proof"
    )
    verifications_per_refinement: int | None = Field(default=None, ge=1, le=1024)
    return_unverified: bool | None = Field(default=None, description="answer even when not accepted")
    verify_tokens: TokenCount | None = Field(default=None, description="max tokens of each verifier call")
    verdict_tokens: TokenCount | None = Field(default=None, description="max tokens of each yes/no call")
    verify_budget: int | None = Field(default=None, gt=0, description="verification tokens in all")
    temperature: float | None = Field(default=None, ge=0)
    max_tokens: TokenCount | None = Field(default=None, description="per solver call; None = run default")
    extract: ExtractMode = "auto"

    @model_validator(mode="after")
    def _fields_fit_scaffold(self) -> VerifyRefineConfig:
        unread = _LOOP_FIELDS if self.scaffold == "deepseek_math" else _POOL_FIELDS
        given = [name for name in unread if getattr(self, name) is not None]
        if given:
            raise ValueError(f"the {self.scaffold} scaffold does not use {', '.join(given)}")
        rules = self.rules()
        if isinstance(rules, PoolRules) and rules.verifications_per_refinement > rules.verifications:
            raise ValueError("verifications_per_refinement must not exceed verifications")
        return self

    def rules(self) -> LoopRules | PoolRules:
        """The preset's numbers, each replaced where this config gives one."""
        preset = PRESETS[self.scaffold]
        names = (*_LOOP_FIELDS, *_POOL_FIELDS, "max_iterations", "return_unverified")
        given = {name: getattr(self, name) for name in names if getattr(self, name) is not None}
        return replace(preset, **given)

    def parallel_samples(self) -> int:
        rules = self.rules()
        return rules.pool_size * rules.verifications if isinstance(rules, PoolRules) else 1


@dataclass(slots=True)
class Verification:
    report: Trace
    passed: bool


class VerifyRefine(BaseStrategy[VerifyRefineConfig]):
    """Write, improve, then verify and correct until enough verdicts pass in a row (or a pool of
    graded proofs refined in waves): the answer is a solution a verifier accepted."""

    name = "verify_refine"
    Config = VerifyRefineConfig
    count_field: ClassVar[str | None] = None  # no single width: the loop has none, the pool its own

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        cfg = self.config
        calls = Calls(
            ctx, cfg.temperature, cfg.max_tokens, cfg.verify_tokens, cfg.verdict_tokens, cfg.verify_budget
        )
        rules = cfg.rules()
        if isinstance(rules, PoolRules):
            return await run_pool(calls, problem, rules, cfg.extract)
        return await self._loop(calls, problem, rules)

    async def _loop(self, calls: Calls, problem: Problem, rules: LoopRules) -> StrategyResult:
        question = problem.question
        (first,) = await calls.solve(calls.request(prompts.solve_chat(question), "generate"), "generate")
        improve = calls.request(prompts.follow_up(question, first.text, prompts.IMPROVE), "improve")
        (solution,) = await calls.solve(improve, "improve", [first.id])
        check = await self._verify(calls, question, solution)
        streak = Streak(rules.accept_after, rules.reject_after)
        verdicts = [check.passed]
        stop: StopRule = "max_iterations"
        iterations = 0
        for _ in range(rules.max_iterations):
            iterations += 1
            if not check.passed:
                streak.correcting()
                solution = await self._correct(calls, question, solution, check.report)
            if calls.exhausted:
                stop = "verify_budget"
                break
            check = await self._verify(calls, question, solution)
            verdicts.append(check.passed)
            streak.verdict(check.passed)
            decided = streak.decision()
            if decided is not None:
                stop = decided
                break
        answered = stop == "accepted" or rules.return_unverified
        metrics = {"iterations": float(iterations), "passes": float(sum(verdicts))}
        metrics["failures"] = float(len(verdicts) - sum(verdicts))
        return finish(calls, annotate(solution, self.config.extract) if answered else None, stop, metrics)

    async def _verify(self, calls: Calls, question: str, solution: Trace) -> Verification:
        """The grader's report, then the yes/no reading of it (both kind "score"). A report that
        failed (an error, no text) is a failing verdict without the second call."""
        chat = prompts.verify_chat(question, detailed_solution(solution.text))
        (report,) = await calls.score(calls.request(chat, "verify"), "verify", [solution.id])
        if not report.is_ok:
            return Verification(report, passed=False)
        ask = [prompts.user(prompts.VERDICT.format(report=report.text))]
        (verdict,) = await calls.score(calls.request(ask, "verdict"), "verdict", [report.id])
        return Verification(report, passed=verdict.is_ok and says_yes(verdict.text))

    async def _correct(self, calls: Calls, question: str, solution: Trace, report: Trace) -> Trace:
        """A rewrite from the report's summary; a correction that failed keeps the old solution."""
        request = prompts.CORRECT.format(report=bug_report(report.text))
        chat = prompts.follow_up(question, solution.text, request)
        (fixed,) = await calls.solve(calls.request(chat, "correct"), "correct", [solution.id, report.id])
        return fixed if fixed.is_ok else solution
