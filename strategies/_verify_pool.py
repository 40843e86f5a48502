"""verify_refine's ``deepseek_math`` scaffold: DeepSeekMath-V2's generate, grade, refine loop as
MathArena runs it (``DeepSeekMathAgent.solve`` in ``src/matharena/solvers/deepseek_math.py``,
numbers from ``configs/agent_scaffolds/deepseek_math.yaml``).

``pool_size`` proofs are written at once (each ends with a self-evaluation, cut off before
grading), and each is graded ``verifications`` times on the 0 / 0.5 / 1 scale. Then, for at most
``max_iterations`` waves: if some proof's mean grade is 1 the loop ends; else the ``pool_size``
best proofs of the whole pool (it grows every wave) are each refined once, shown with their
``verifications_per_refinement`` lowest grades, and the new proofs are graded like the first. The
answer is the proof with the highest mean grade (the first of equals). A spent verification budget
ends the loop before a wave's refinements (a refinement that could not be graded would be waste).
"""

from __future__ import annotations

from collections.abc import Sequence

from paragen.answers import ExtractMode, extract_answer
from paragen.types import GenerateRequest, Problem, StrategyResult, Trace
from strategies import _verify_prompts as prompts
from strategies._verify_calls import Calls, finish
from strategies._verify_rules import PoolRules, StopRule, best, grade, mean, proof_section, ranked, weakest


async def run_pool(calls: Calls, problem: Problem, rules: PoolRules, extract: ExtractMode) -> StrategyResult:
    question = problem.question
    first = calls.request([prompts.user(prompts.pool_solve(question))], "generate", n=rules.pool_size)
    pool = await calls.solve(first, "generate")
    grades = await _grade(calls, question, pool, rules.verifications)
    stop: StopRule = "max_iterations"
    waves = 0
    for _ in range(rules.max_iterations):
        scores = [mean([grade(t.text) for t in g]) for g in grades]
        if max(scores) >= 1.0:
            stop = "accepted"
            break
        if calls.exhausted:
            stop = "verify_budget"
            break
        waves += 1
        chosen = ranked(scores, rules.pool_size)
        shown = [_lowest(grades[i], rules.verifications_per_refinement) for i in chosen]
        new = await _refine(calls, question, [pool[i] for i in chosen], shown)
        pool += new
        grades += await _grade(calls, question, new, rules.verifications)
    scores = [mean([grade(t.text) for t in g]) for g in grades]
    if stop == "max_iterations" and max(scores) >= 1.0:
        stop = "accepted"  # the last wave's proofs are never checked by the loop itself
    top = pool[best(scores)]
    proof = proof_section(top.text)
    top.answer = extract_answer(proof, extract) if top.is_ok else None
    answered = stop == "accepted" or rules.return_unverified
    metrics = {"iterations": float(waves), "proofs": float(len(pool)), "best_grade": scores[best(scores)]}
    return finish(calls, top if answered else None, stop, metrics, text=proof)


def _lowest(grades: Sequence[Trace], count: int) -> list[Trace]:
    return [grades[j] for j in weakest([grade(t.text) for t in grades], count)]


async def _grade(calls: Calls, question: str, proofs: Sequence[Trace], count: int) -> list[list[Trace]]:
    """Each proof graded ``count`` times at once (kind "score", the proof its parent); the grades
    by proof, in choice order. Every request is built before any starts, so seeds follow the pool."""
    chats = [[prompts.user(prompts.pool_verify(question, proof_section(t.text)))] for t in proofs]
    requests = [calls.request(chat, "verify", n=count) for chat in chats]
    found: list[list[Trace]] = [[] for _ in proofs]

    async def one(i: int) -> None:
        found[i] = await calls.score(requests[i], "verify", [proofs[i].id])
        for trace in found[i]:
            trace.meta["grade"] = grade(trace.text)

    async with calls.ctx.concurrently() as children:
        for i in range(len(proofs)):
            children.start(one, i)
    return found


async def _refine(
    calls: Calls, question: str, chosen: Sequence[Trace], shown: Sequence[Sequence[Trace]]
) -> list[Trace]:
    """One refinement per chosen proof, from its text and the grades shown (its parents: both)."""
    requests: list[GenerateRequest] = []
    for proof, grades in zip(chosen, shown, strict=True):
        text = prompts.pool_refine(question, proof_section(proof.text), [g.text for g in grades])
        requests.append(calls.request([prompts.user(text)], "refine"))
    found: list[Trace | None] = [None] * len(chosen)

    async def one(i: int) -> None:
        parents = [chosen[i].id, *(g.id for g in shown[i])]
        (found[i],) = await calls.solve(requests[i], "refine", parents)

    async with calls.ctx.concurrently() as children:
        for i in range(len(chosen)):
            children.start(one, i)
    return [t for t in found if t is not None]
