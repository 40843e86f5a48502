"""verify_refine's decisions as plain functions: the presets, the counters that accept or reject a
solution, and the pool scaffold's scoring and selection. No event loop, no context: unit-tested alone.

Matched against the authors' code (read, not copied):

- ``Streak`` is the counter pair of ``agent()`` in lyang36/IMO25 ``code/agent.py`` (the same in
  ``code/agent_gpt_oss.py``): ``correct_count`` starts at 1 (the initial verification's credit),
  ``error_count`` at 0; an iteration that follows a failing verdict first zeroes ``correct_count``
  and adds one to ``error_count``, then corrects; a passing verdict adds one to ``correct_count``
  and zeroes ``error_count``; after each verification ``correct_count >= 5`` accepts, else
  ``error_count >= 10`` rejects.
- ``detailed_solution`` and ``bug_report`` are that file's ``extract_detailed_solution`` (after
  "Detailed Solution"; before "Detailed Verification"); ``says_yes`` its ``"yes" in o.lower()``.
- ``proof_section``, ``grade``, ``ranked`` and ``weakest`` follow MathArena
  ``src/matharena/solvers/deepseek_math.py`` (``DeepSeekMathAgent.extract_proof``,
  ``extract_score``, the ``np.argsort(scores)[-pool_size:]`` selection and the lowest-scored
  verifications per refinement).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Scaffold = Literal["huang_yang", "selfcheck", "deepseek_math"]
StopRule = Literal["accepted", "rejected", "max_iterations", "verify_budget"]
STOP_RULES: tuple[StopRule, ...] = ("accepted", "rejected", "max_iterations", "verify_budget")


@dataclass(frozen=True, slots=True)
class LoopRules:
    """One solution verified and corrected in turn (Huang & Yang; MathArena's selfcheck numbers)."""

    accept_after: int  # consecutive passing verdicts that accept
    reject_after: int  # consecutive corrections whose verdicts all failed that reject
    max_iterations: int
    return_unverified: bool  # a run that was not accepted still answers with its last solution


@dataclass(frozen=True, slots=True)
class PoolRules:
    """A pool of proofs, each graded many times, the best refined (DeepSeekMath-V2 as MathArena runs it)."""

    pool_size: int  # proofs written at first, and refined per iteration
    verifications: int  # grades of each proof
    verifications_per_refinement: int  # the lowest grades shown to each refinement
    max_iterations: int
    return_unverified: bool  # answer with the best proof even when none was graded 1 by all


PRESETS: dict[Scaffold, LoopRules | PoolRules] = {
    # lyang36/IMO25 code/agent.py, agent(): 5 passes accept, 10 failures reject, 30 iterations; None if not.
    "huang_yang": LoopRules(accept_after=5, reject_after=10, max_iterations=30, return_unverified=False),
    # MathArena configs/agent_scaffolds/selfcheck.yaml (correct_count, error_count, max_iterations);
    # its SelfcheckAgent returns "Fail." unless return_if_not_found.
    "selfcheck": LoopRules(accept_after=2, reject_after=4, max_iterations=10, return_unverified=False),
    # MathArena configs/agent_scaffolds/deepseek_math.yaml; DeepSeekMathAgent always returns its best proof.
    "deepseek_math": PoolRules(
        pool_size=16,
        verifications=16,
        verifications_per_refinement=4,
        max_iterations=4,
        return_unverified=True,
    ),
}

_SOLUTION_MARK = "Detailed Solution"
_REPORT_MARK = "Detailed Verification"


def detailed_solution(text: str) -> str:
    """What the verifier reads: the text after "Detailed Solution". Where the mark is missing the
    authors send an empty solution (which can only fail); the whole text is sent instead."""
    at = text.find(_SOLUTION_MARK)
    return text if at < 0 else text[at + len(_SOLUTION_MARK) :].strip()


def bug_report(report: str) -> str:
    """What the correction reads: the report's summary, before "Detailed Verification". Where the
    mark is missing the authors pass an empty report; the whole report is passed instead."""
    at = report.find(_REPORT_MARK)
    return report if at < 0 else report[:at].strip()


def says_yes(verdict: str) -> bool:
    """The authors' reading of the verdict call: "yes" anywhere in it, any case."""
    return "yes" in verdict.lower()


@dataclass(slots=True)
class Streak:
    """The authors' two counters and the rules they feed (see the module docstring)."""

    accept_after: int
    reject_after: int
    passes: int = 1  # the authors' correct_count = 1: the initial verification's credit
    failures: int = 0

    def correcting(self) -> None:
        """An iteration after a failing verdict: the pass streak ends, one more failure counts."""
        self.passes = 0
        self.failures += 1

    def verdict(self, passed: bool) -> None:
        if passed:
            self.passes += 1
            self.failures = 0

    def decision(self) -> StopRule | None:
        if self.passes >= self.accept_after:
            return "accepted"
        if self.failures >= self.reject_after:
            return "rejected"
        return None


_SOLUTION_HEAD = re.compile(r"##\s*solution", re.IGNORECASE)
_EVALUATION_HEAD = re.compile(r"##\s*self\s*evaluation", re.IGNORECASE)
_EVALUATION_SOFT = re.compile(r"self\s*evaluation", re.IGNORECASE)
_GRADE = re.compile(r"boxed\{\s*(0|0\.5|1)\s*\}")
EMPTY_PROOF = "[no solution was written]"


def proof_section(text: str) -> str:
    """A pool proof: the text between "## Solution" and "## Self Evaluation" (either may be missing;
    an empty result is a placeholder that any grader fails)."""
    start = _SOLUTION_HEAD.search(text)
    end = _EVALUATION_HEAD.search(text) or _EVALUATION_SOFT.search(text)
    begin = start.end() if start else 0
    stop = end.start() if end and (start is None or end.start() > begin) else len(text)
    return text[begin:stop].strip() or EMPTY_PROOF


def grade(text: str) -> float:
    """A grader's score: its last boxed 0, 0.5 or 1 (MathArena takes the first; the last is the one
    the prompt asks for, where an earlier box may quote the solution); none found is 0."""
    found = _GRADE.findall(text)
    return float(found[-1]) if found else 0.0


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def ranked(scores: Sequence[float], keep: int) -> list[int]:
    """The ``keep`` best proofs' indices, ascending by score (a stable sort: of equal scores the
    later proof ranks higher, as the reference's argsort tail mostly gives)."""
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    return order[-keep:]


def weakest(grades: Sequence[float], count: int) -> list[int]:
    """The indices of a proof's ``count`` lowest grades, lowest first (ties in grading order)."""
    return sorted(range(len(grades)), key=lambda i: grades[i])[:count]


def best(scores: Sequence[float]) -> int:
    """The first proof with the highest mean grade (``np.argmax``)."""
    return max(range(len(scores)), key=lambda i: (scores[i], -i))
