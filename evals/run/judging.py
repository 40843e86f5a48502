"""Proof grading: LLM judges score a proof 0-7 against the problem's guideline.

Each judge is any paragen backend (``--judge SPEC``, built as the harness builds its own). It is
asked, in paragen's words, with the problem, the grading guideline, the reference solution (where
the task has one) and the candidate proof: reason first, then give the score as
``<score>N</score>``; the last such tag in the reply counts. A reply without one (or with a number
above 7) gives that judge no score, with the cause. A judge whose backend fails gives no score
either, with the error as the cause.

Several judges are aggregated as MathArena does (eth-sri/matharena ``scripts/judge/judge.py``,
``recompute_correct_and_pass_at_1``): the mean of the scores of the judges that gave one, a judge
without a score left out of the mean. MathArena then reports that mean (as a fraction of the
points) as the problem's accuracy; paragen keeps it as ``grade.score`` (0-7) and counts a proof
``correct`` only when the mean is 7, i.e. every judge that scored it gave full marks (the report's
accuracy is the share of full-mark proofs; the mean score is in each record). When no judge gave a
score the outcome is ``grader_error``, with the first judge's cause.

Judge calls are kept apart from the strategy's: their tokens are in ``grade.judges``, never in
``result.usage``. The proof is the result's ``text`` (the deciding sample's output).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import anyio

from evals.run.grading import Grade, Outcome, pre_grade
from evals.run.records import JudgeScore
from paragen.backends.base import Backend, generate
from paragen.errors import BackendError
from paragen.types import ChatMessage, GenerateRequest, Problem, SamplingParams, StrategyResult

FULL_MARKS = 7
_SCORE = re.compile(r"<score>\s*(\d+)\s*</score>", re.IGNORECASE)

JUDGE_PROMPT = """You are grading a proof written for a competition mathematics problem. \
Grade it on a scale of 0 to 7 points, following the grading guideline below. A reference \
solution is given to help you; a different approach that is complete and rigorous earns full \
marks too. Judge only what the candidate wrote: a step that is claimed without justification is \
a gap, and a wrong step is an error.

## Problem
{problem}

## Grading guideline
{guideline}

## Reference solution
{reference}

## Candidate proof
{proof}

First explain your assessment: check the proof step by step against the guideline and name any \
errors or gaps. Then end your reply with the score on its own line, written exactly as \
<score>N</score> where N is a whole number from 0 to 7."""


@dataclass(frozen=True)
class Judge:
    """A judge: its name as recorded (a backend spec without credentials) and its backend."""

    name: str
    backend: Backend


def judge_prompt(problem: Problem, proof: str) -> str:
    meta = problem.meta
    return JUDGE_PROMPT.format(
        problem=problem.question,
        guideline=meta.get("guideline") or "(none given)",
        reference=meta.get("reference") or "(none given)",
        proof=proof,
    )


def read_score(reply: str) -> tuple[int | None, str | None]:
    """The last ``<score>N</score>`` of a judge's reply, or None and why there is none."""
    found = _SCORE.findall(reply)
    if not found:
        return None, "the judge's reply has no <score>N</score>"
    score = int(found[-1])
    if score > FULL_MARKS:
        return None, f"the judge's score {score} is above {FULL_MARKS}"
    return score, None


def proof_text(result: StrategyResult) -> str | None:
    """The candidate proof: the result's text, else the last finished sample's."""
    if result.text and result.text.strip():
        return result.text
    done = [t.text for t in result.traces if t.kind == "sample" and t.status == "ok" and t.text.strip()]
    return done[-1] if done else None


async def ask(judge: Judge, problem: Problem, proof: str, params: SamplingParams) -> JudgeScore:
    """One judge's verdict on one proof; a failing backend is a verdict without a score."""
    messages = (ChatMessage(role="user", content=judge_prompt(problem, proof)),)
    try:
        completion = (await generate(judge.backend, GenerateRequest(messages=messages, params=params)))[0]
    except BackendError as exc:
        return JudgeScore(judge=judge.name, score=None, reasoning="", tokens=0, cause=f"{exc}"[:500])
    reply = completion.text if not completion.reasoning else f"{completion.reasoning}\n\n{completion.text}"
    score, cause = read_score(completion.text or completion.reasoning)
    tokens = completion.num_tokens
    return JudgeScore(judge=judge.name, score=score, reasoning=reply, tokens=tokens, cause=cause)


def aggregate(verdicts: Sequence[JudgeScore], answer: str | None) -> Grade:
    """The grade of a proof from its judges' verdicts: the mean of the scores given (MathArena's rule)."""
    scores = [v.score for v in verdicts if v.score is not None]
    if not scores:
        cause = next((v.cause for v in verdicts if v.cause), "no judge gave a score")
        return Grade("grader_error", answer, None, cause, judges=list(verdicts))
    mean = sum(scores) / len(scores)
    outcome: Outcome = "correct" if mean == FULL_MARKS else "incorrect"
    return Grade(outcome, answer, None, None, score=mean, judges=list(verdicts))


async def grade_proof(
    judges: Sequence[Judge], problem: Problem, result: StrategyResult, params: SamplingParams
) -> Grade:
    """A proof result's grade: every judge asked at once, unless there is no proof to judge."""
    early = pre_grade(result, None)
    if early is not None and early.outcome == "error":
        return early
    proof = proof_text(result)
    if proof is None:
        return Grade("no_answer", result.answer, None, "no proof text to judge")
    verdicts: list[JudgeScore | None] = [None] * len(judges)

    async def one(index: int) -> None:
        verdicts[index] = await ask(judges[index], problem, proof, params)

    async with anyio.create_task_group() as group:
        for index in range(len(judges)):
            group.start_soon(one, index)
    return aggregate([v for v in verdicts if v is not None], result.answer)


def judge_params(max_tokens: int) -> SamplingParams:
    """Judges sample greedily (temperature 0), with room for their reasoning."""
    return SamplingParams(max_tokens=max_tokens, temperature=0.0)
