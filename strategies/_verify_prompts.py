"""The wording of verify_refine's calls: paragen's own words for the roles the published scaffolds
give each call (lyang36/IMO25 ``code/agent.py``; MathArena ``configs/agent_scaffolds/deepseek_math.yaml``).

The structure is what the methods depend on, so it is kept: the solver writes a summary and then a
section headed "Detailed Solution" (the verifier reads only what follows it); the verifier sorts its
findings into critical errors and justification gaps and writes its summary before a section headed
"Detailed Verification" (the bug report handed to the correction is what precedes it); the verdict
call answers yes or no. In the pool scaffold a proof sits under "## Solution" before
"## Self Evaluation", and every grade is a boxed 0, 0.5 or 1.
"""

from __future__ import annotations

from paragen.types import ChatMessage

SOLVE_SYSTEM = (
    "You write rigorous solutions to competition mathematics problems. Every step must be justified: "
    "a correct final answer reached through a flawed or incomplete argument counts as a failure. "
    "If you cannot solve the problem completely, say so plainly and present only the partial "
    "results you can actually prove (a key lemma, some of the cases, one of two bounds) instead of "
    "an argument that only looks complete. Write all mathematics in TeX.\n\n"
    "Reply in two parts, in this order.\n"
    "## Summary\nSay whether your solution is complete or partial. If the problem asks for an "
    "answer, state it as \\boxed{...}. Then sketch the argument: the overall plan and the exact "
    "statements of the key lemmas.\n"
    "## Detailed Solution\nThe full proof, step by step, detailed enough for an expert to check "
    "every step, with no side remarks, alternatives or abandoned attempts.\n\n"
    "Before you finish, reread both parts and make sure they are clean and rigorous."
)

IMPROVE = (
    "Go over your solution again with care. Fix every error and close every gap in the "
    "justification you find, then give the whole solution again in the format asked for above."
)

VERIFY_SYSTEM = (
    "You grade proofs for an olympiad-level mathematics competition. A solution passes only if "
    "every step is justified. Your job is to find and report problems, not to solve the problem "
    "or repair the solution.\n\n"
    "Check the solution step by step and sort each problem you find into one of two kinds.\n"
    "- Critical error: a step that breaks the chain of reasoning (a false claim, a wrong "
    "calculation, an invalid inference). Explain it, do not check the steps that depend on it, "
    "but do check the parts of the solution that are independent of it (other cases, say).\n"
    "- Justification gap: a step whose conclusion may hold but whose argument is incomplete or "
    "hand-waving. Explain what is missing, assume the conclusion, and keep checking.\n\n"
    "Reply in two parts, in this order.\n"
    "## Summary\nOne sentence giving your verdict on the whole solution, then a list of every "
    "finding: where it is (quote the phrase or equation) and which kind it is.\n"
    "## Detailed Verification\nYour step-by-step log: a short reason for each sound step, a full "
    "explanation for each flawed one, quoting the text you refer to."
)

VERIFY_USER = (
    "### Problem\n\n{problem}\n\n### Solution\n\n{solution}\n\n### Your task\n\n"
    "Grade the solution above: write the summary and then the step-by-step verification log, "
    "as your instructions describe."
)

VERDICT = (
    "Answer yes or no, nothing else. Does the grading report below conclude that the solution is "
    "correct, that is, that it has no critical error and no major justification gap?\n\n{report}"
)

CORRECT = (
    "A grader checked your solution and wrote the report below. Where you agree with a finding, "
    "revise the solution so that it becomes complete and rigorous. Graders misread arguments too: "
    "where you disagree with a finding, keep the step but explain it in more detail so that the "
    "misreading cannot happen again. Give the whole revised solution in the format asked for "
    "above.\n\n{report}"
)

RUBRIC = (
    "- 1: completely correct; every step carried out properly and shown clearly.\n"
    "- 0.5: correct in substance, but some details are left out or there are minor errors.\n"
    "- 0: wrong, does not address the problem asked, or leaves out something essential.\n"
    "Citing a known result does not replace proving it: a solution that relies on a citation "
    "without a correct proof of it cannot score 1."
)

POOL_SOLVE = (
    "Solve the problem below. If it asks for an answer, find it, state it as \\boxed{{...}}, and "
    "prove that it is right. Your solution will be graded on this scale:\n\n{rubric}\n\n"
    "Grade your own work honestly on the same scale and repair what you can before you finish. "
    "Claiming a flawed solution is correct is the worst possible outcome; admitting an unresolved "
    "issue is much better.\n\n"
    "Reply with a section headed '## Solution' holding your solution, then a section headed "
    "'## Self Evaluation' with your assessment of it step by step, ending with your score as "
    "\\boxed{{0}}, \\boxed{{0.5}} or \\boxed{{1}}.\n\n## Problem\n\n{problem}"
)

POOL_VERIFY = (
    "Grade the solution to the problem below on this scale:\n\n{rubric}\n\n"
    "Go through its key steps, especially the doubtful ones, and say for each whether it holds "
    "and why. End with your score as \\boxed{{0}}, \\boxed{{0.5}} or \\boxed{{1}}.\n\n"
    "## Problem\n\n{problem}\n\n## Solution\n\n{proof}"
)

POOL_REFINE = (
    "{solve}\n\n## A solution to improve\n\nBelow is a solution to this problem and some graders' "
    "assessments of it. Write a better one: repair the issues the graders raise, reuse the ideas "
    "that work, or both.\n\n### Solution\n\n{proof}\n\n### Assessments{assessments}\n\n"
    "Reply in the format asked for above: '## Solution', then '## Self Evaluation'."
)


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def solve_chat(question: str) -> list[ChatMessage]:
    """The solver's opening turns (the authors' system prompt and the bare problem)."""
    return [ChatMessage(role="system", content=SOLVE_SYSTEM), user(question)]


def follow_up(question: str, solution: str, request: str) -> list[ChatMessage]:
    """The solver's chat continued: its ``solution`` as its own turn, then ``request`` (the
    self-improvement and the correction calls both take this shape)."""
    return [*solve_chat(question), ChatMessage(role="assistant", content=solution), user(request)]


def verify_chat(question: str, solution: str) -> list[ChatMessage]:
    return [
        ChatMessage(role="system", content=VERIFY_SYSTEM),
        user(VERIFY_USER.format(problem=question, solution=solution)),
    ]


def pool_solve(question: str) -> str:
    return POOL_SOLVE.format(rubric=RUBRIC, problem=question)


def pool_verify(question: str, proof: str) -> str:
    return POOL_VERIFY.format(rubric=RUBRIC, problem=question, proof=proof)


def pool_refine(question: str, proof: str, assessments: list[str]) -> str:
    listed = "".join(f"\n\n#### Assessment {i + 1}\n{text}" for i, text in enumerate(assessments))
    return POOL_REFINE.format(solve=pool_solve(question), proof=proof, assessments=listed)
