"""verify_refine on the scripted backend: every call in order (kind, label, parents, prompt), the
tokens counted per kind, and each stop rule firing at exactly the published count."""

from __future__ import annotations

import re
from typing import Any

import pytest
from strategy_helpers import PROBLEM, SYNC

from paragen.backends.scripted import Script, ScriptedBackend, tokenize
from paragen.errors import ConfigError
from paragen.orchestrator import Orchestrator
from paragen.types import ChatMessage, GenerateRequest, SamplingParams, StrategyResult, Trace
from strategies import _verify_prompts as prompts
from strategies._verify_rules import (
    PoolRules,
    Streak,
    bug_report,
    detailed_solution,
    grade,
    proof_section,
    ranked,
    weakest,
)
from strategies.verify_refine import VerifyRefine

Y, N = True, False


def solution(version: int) -> str:
    return f"## Summary draft v{version} \\boxed{{5}} ## Detailed Solution proof v{version}"


class Loop:
    """Replies by role: drafts and corrections number their solutions, the grader names the
    version it read, and the verdict call answers from ``verdicts`` in order."""

    def __init__(self, verdicts: list[bool]) -> None:
        self.verdicts = list(verdicts)
        self.fixes = 0

    def __call__(self, request: GenerateRequest, index: int) -> Script:
        messages = request.messages or ()
        last = messages[-1].content
        if messages[0].content == prompts.VERIFY_SYSTEM:
            version = re.findall(r"proof v(\d+)", last)[0]
            return Script(text=f"## Summary report on v{version} ## Detailed Verification log v{version}")
        if last.startswith(prompts.VERDICT[:20]):
            return Script(text=("yes" if self.verdicts.pop(0) else "no") if self.verdicts else "exhausted")
        if last == prompts.IMPROVE:
            return Script(text=solution(1))
        if last.startswith(prompts.CORRECT[:30]):
            self.fixes += 1
            return Script(text=solution(self.fixes + 1))
        return Script(text=solution(0))


async def run_loop(
    verdicts: list[bool], seed: int | None = None, **options: Any
) -> tuple[StrategyResult, ScriptedBackend, Loop]:
    loop = Loop(verdicts)
    backend = ScriptedBackend(loop, capabilities=SYNC)
    orch = Orchestrator(backend, defaults=SamplingParams(max_tokens=64, seed=seed))
    result = await orch.run(VerifyRefine(**options), PROBLEM)
    assert loop.verdicts == [], "the run read fewer verdicts than scripted"
    return result, backend, loop


def labels(result: StrategyResult) -> list[str]:
    return [t.label for t in result.traces]


def opening(*rounds: str) -> list[str]:
    return ["generate", "improve", "verify", "verdict", *rounds]


def check_chain(result: StrategyResult) -> None:
    """Kinds and parents of every call: solver calls are samples, verifier calls "score"; a
    verification names the solution it read, a verdict its report, a correction both."""
    current: Trace | None = None
    report: Trace | None = None
    for trace in result.traces:
        assert trace.kind == ("score" if trace.label in ("verify", "verdict") else "sample"), trace.label
        if trace.label == "generate":
            assert trace.parents == []
        elif trace.label == "improve":
            assert current is not None and current.label == "generate" and trace.parents == [current.id]
        elif trace.label == "verify":
            assert current is not None and trace.parents == [current.id]
            report = trace
        elif trace.label == "verdict":
            assert report is not None and trace.parents == [report.id]
        else:
            assert trace.label == "correct" and current is not None and report is not None
            assert trace.parents == [current.id, report.id]
        if trace.kind == "sample":
            current = trace


def contents(request: GenerateRequest) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in request.messages or ()]


@pytest.mark.anyio
async def test_five_passes_accept_and_every_call_is_exact() -> None:
    result, backend, _ = await run_loop([Y] * 5)
    assert labels(result) == opening(*["verify", "verdict"] * 4)  # the initial pass counts: 4 more
    check_chain(result)
    asks = [s.request for s in backend.streams]
    assert contents(asks[0]) == [("system", prompts.SOLVE_SYSTEM), ("user", PROBLEM.question)]
    assert contents(asks[1]) == [
        ("system", prompts.SOLVE_SYSTEM),
        ("user", PROBLEM.question),
        ("assistant", solution(0)),
        ("user", prompts.IMPROVE),
    ]
    grader = prompts.VERIFY_USER.format(problem=PROBLEM.question, solution="proof v1")
    assert contents(asks[2]) == [("system", prompts.VERIFY_SYSTEM), ("user", grader)]
    report = "## Summary report on v1 ## Detailed Verification log v1"
    assert contents(asks[3]) == [("user", prompts.VERDICT.format(report=report))]
    assert all(contents(a) == contents(asks[2 + i % 2]) for i, a in enumerate(asks[2:]))
    assert result.answer == "5" and result.text == solution(1)
    assert result.details["stop_rule"] == "accepted"
    assert result.metrics == {
        "iterations": 4.0,
        "passes": 5.0,
        "failures": 0.0,
        "verifications": 5.0,
        "verification_tokens": float(result.usage.score_tokens),
        "stop_accepted": 1.0,
    }


@pytest.mark.anyio
async def test_tokens_are_counted_per_kind() -> None:
    result, backend, _ = await run_loop([Y] * 5)
    usage, traces = result.usage, result.traces
    assert usage.total_tokens == 2 * len(tokenize(solution(0))) == 20  # the solver's calls only
    assert usage.sequential_tokens == 20 and usage.num_samples == 2
    scored = [(t, s) for t, s in zip(traces, backend.streams, strict=True) if t.kind == "score"]
    assert usage.num_scores == 10
    assert [t.completion_tokens for t, _ in scored] == [10, 1] * 5  # a report, then "yes"
    prompts_read = [len(tokenize("".join(c for _, c in contents(s.request)))) for _, s in scored]
    assert [t.prompt_tokens for t, _ in scored] == prompts_read
    assert usage.score_tokens == sum(prompts_read) + 55 == result.metrics["verification_tokens"]


@pytest.mark.anyio
async def test_a_failure_resets_the_pass_streak() -> None:
    # Four passes in a row, one failure: the correction's solution needs five passes of its own.
    result, backend, loop = await run_loop([Y, Y, Y, Y, N, Y, Y, Y, Y, Y])
    assert labels(result) == opening(*["verify", "verdict"] * 4, "correct", *["verify", "verdict"] * 5)
    check_chain(result)
    assert loop.fixes == 1 and result.text == solution(2)
    correction = backend.streams[12].request  # after two solver calls and 5 verifications of two
    assert contents(correction)[2:] == [
        ("assistant", solution(1)),
        ("user", prompts.CORRECT.format(report="## Summary report on v1 ##")),  # what precedes the log
    ]
    assert result.metrics["iterations"] == 9 and result.details["stop_rule"] == "accepted"


@pytest.mark.anyio
async def test_ten_failed_corrections_reject_and_answer_nothing() -> None:
    result, _, loop = await run_loop([N] * 11)
    assert labels(result) == opening(*["correct", "verify", "verdict"] * 10)
    check_chain(result)
    assert loop.fixes == 10 and result.answer is None and result.text is None
    assert result.details["stop_rule"] == "rejected" and result.metrics["stop_rejected"] == 1.0
    assert (result.metrics["failures"], result.metrics["iterations"]) == (11.0, 10.0)


@pytest.mark.anyio
async def test_the_tenth_corrections_pass_clears_the_failures() -> None:
    # The failure count is the authors' error_count: raised by a correction, checked after its
    # verdict, cleared by a pass, so a tenth correction that passes goes on (and five passes accept).
    result, _, loop = await run_loop([N] * 10 + [Y] * 5)
    assert loop.fixes == 10 and result.details["stop_rule"] == "accepted"
    assert result.answer == "5" and result.metrics["iterations"] == 14


@pytest.mark.anyio
async def test_a_pass_restarts_the_failure_count() -> None:
    result, _, loop = await run_loop([N] * 9 + [Y] + [N] * 11)
    assert loop.fixes == 9 + 10 and result.details["stop_rule"] == "rejected"
    assert result.metrics["iterations"] == 20


@pytest.mark.anyio
async def test_thirty_iterations_cap_the_loop() -> None:
    result, _, loop = await run_loop([N, Y] * 15 + [N])
    assert len(labels(result)) == 4 + 15 * 3 + 15 * 2 and loop.fixes == 15
    assert result.metrics["iterations"] == 30 and result.details["stop_rule"] == "max_iterations"
    assert result.answer is None
    again, _, _ = await run_loop([N, Y] * 15 + [N], return_unverified=True)
    assert again.answer == "5" and again.text == solution(16)


@pytest.mark.anyio
async def test_selfcheck_numbers() -> None:
    accepted, _, _ = await run_loop([Y, Y], scaffold="selfcheck")
    assert labels(accepted) == opening("verify", "verdict") and accepted.metrics["stop_accepted"] == 1
    rejected, _, loop = await run_loop([N] * 5, scaffold="selfcheck")
    assert loop.fixes == 4 and rejected.details["stop_rule"] == "rejected"
    capped, _, _ = await run_loop([N, Y] * 5 + [N], scaffold="selfcheck")
    assert capped.metrics["iterations"] == 10 and capped.details["stop_rule"] == "max_iterations"
    mine, _, _ = await run_loop([Y] * 3, scaffold="selfcheck", accept_after=3)
    assert mine.metrics["iterations"] == 2 and mine.details["stop_rule"] == "accepted"


@pytest.mark.anyio
async def test_the_verification_budget_stops_the_loop() -> None:
    first, _, _ = await run_loop([Y] * 5)
    one = sum(t.prompt_tokens + t.completion_tokens for t in first.traces[2:4])
    result, _, _ = await run_loop([N, N], verify_budget=one + 1)  # spent after the second
    assert labels(result) == opening("correct", "verify", "verdict", "correct")
    assert result.details["stop_rule"] == "verify_budget" and result.answer is None
    assert result.metrics["verification_tokens"] == result.usage.score_tokens > one + 1
    assert result.metrics["stop_verify_budget"] == 1.0 and result.metrics["iterations"] == 2


@pytest.mark.anyio
async def test_token_caps_and_seeds_per_call() -> None:
    result, backend, _ = await run_loop(
        [Y] * 5, seed=3, verify_tokens=5, verdict_tokens=2, max_tokens=40, temperature=0.1
    )
    caps = [s.request.params.max_tokens for s in backend.streams]
    assert caps == [40, 40, *[5, 2] * 5]
    assert {s.request.params.temperature for s in backend.streams} == {0.1}
    assert [s.request.params.seed for s in backend.streams] == list(range(3, 15))
    reports = [t for t in result.traces if t.label == "verify"]
    assert all(t.completion_tokens == 5 and t.finish_reason == "length" for t in reports)


def test_counters_and_parsing_rules() -> None:
    streak = Streak(accept_after=5, reject_after=10)
    assert (streak.passes, streak.failures, streak.decision()) == (1, 0, None)
    streak.verdict(False)  # a failing verdict changes nothing until the correction
    assert (streak.passes, streak.failures) == (1, 0)
    streak.correcting()
    assert (streak.passes, streak.failures) == (0, 1)
    assert detailed_solution("a Detailed Solution  b ") == "b" and detailed_solution("x") == "x"
    assert bug_report("s Detailed Verification l") == "s" and bug_report("r") == "r"
    assert proof_section("x ## Solution p ## Self Evaluation \\boxed{1}") == "p"
    assert proof_section("## self evaluation") == "[no solution was written]"
    assert grade("quote \\boxed{1} ... \\boxed{ 0.5 }") == 0.5 and grade("none") == 0.0
    assert ranked([0.5, 0.0, 0.5, 0.25], 3) == [3, 0, 2] and weakest([1, 0, 0.5, 0], 2) == [1, 3]


def test_config_presets_and_refusals() -> None:
    rules = VerifyRefine(scaffold="deepseek_math", max_iterations=2).config.rules()
    assert isinstance(rules, PoolRules) and (rules.pool_size, rules.max_iterations) == (16, 2)
    for bad in (
        {"pool_size": 4},
        {"scaffold": "deepseek_math", "accept_after": 2},
        {"scaffold": "deepseek_math", "verifications": 2},  # fewer than the 4 shown per refinement
        {"verify_budget": 0},
    ):
        with pytest.raises(ConfigError):
            VerifyRefine(**bad)


def test_prompt_shapes() -> None:
    assert prompts.follow_up("Q", "S", "R")[2:] == [
        ChatMessage(role="assistant", content="S"),
        ChatMessage(role="user", content="R"),
    ]
    refine = prompts.pool_refine("Q {x}", "P", ["a", "b"])
    assert "Q {x}" in refine and "#### Assessment 2\nb" in refine and "\\boxed{0.5}" in refine


GRADES = {"g0": "0 0.5 0 0.5", "g1": "0.5 0.5 0.5 0", "g2": "0 0 0 0", "rg1": "1 1 1 1"}


def pool_responder(request: GenerateRequest, index: int) -> Script:
    """Generations are proofs g<choice>; a refinement of proof X is rX; a grader grades the proof
    it read from GRADES by its choice index (0 where none is listed)."""
    content = (request.messages or ())[-1].content
    if content.startswith("Grade the solution"):
        name = content.split("## Solution\n\n")[-1].split()[0].removeprefix("proof-")
        score = GRADES.get(name, "0 0 0 0").split()[index % 4]
        return Script(text=f"checked proof-{name} \\boxed{{{score}}}")
    if "## A solution to improve" in content:
        name = content.split("### Solution\n\n")[-1].split()[0].removeprefix("proof-")
        return Script(text=f"## Solution proof-r{name} \\boxed{{5}} ## Self Evaluation \\boxed{{1}}")
    return Script(text=f"## Solution proof-g{index} \\boxed{{{index + 4}}} ## Self Evaluation \\boxed{{1}}")


async def run_pool(**options: Any) -> StrategyResult:
    backend = ScriptedBackend(pool_responder, capabilities=SYNC)
    result = await Orchestrator(backend).run(VerifyRefine(scaffold="deepseek_math", **options), PROBLEM)
    return result


def proof_name(trace: Trace) -> str:
    return str(re.findall(r"proof-(\w+)", trace.text)[0])


@pytest.mark.anyio
async def test_pool_grades_refines_the_best_with_their_lowest_grades_and_accepts() -> None:
    result = await run_pool(pool_size=3, verifications=4, verifications_per_refinement=2, max_iterations=2)
    by_id = {t.id: t for t in result.traces}
    generated = [t for t in result.traces if t.label == "generate"]
    refined = sorted((t for t in result.traces if t.label == "refine"), key=proof_name)
    grades = [t for t in result.traces if t.label == "verify"]
    assert [proof_name(t) for t in generated] == ["g0", "g1", "g2"] and len(refined) == 3
    assert all(t.kind == "sample" and not t.parents for t in generated)
    assert all(t.kind == "score" and len(t.parents) == 1 for t in grades) and len(grades) == 6 * 4
    assert [proof_name(t) for t in refined] == ["rg0", "rg1", "rg2"]
    for trace in refined:  # the proof refined, then its two lowest grades (ties in grading order)
        parent, *shown = (by_id[p] for p in trace.parents)
        assert trace.kind == "sample" and "r" + proof_name(parent) == proof_name(trace)
        expected = {"g0": ["0", "0"], "g1": ["0", "0.5"], "g2": ["0", "0"]}[proof_name(parent)]
        assert [t.text.split("{")[-1][:-1] for t in shown] == expected
        assert all(t.parents == [parent.id] for t in shown)
    assert result.answer == "5" and result.text == "proof-rg1 \\boxed{5}"  # the self-evaluation cut off
    assert result.details["stop_rule"] == "accepted" and result.metrics["iterations"] == 1
    assert result.metrics["best_grade"] == 1.0 and result.usage.num_scores == 24
    assert result.usage.score_tokens == sum(t.prompt_tokens + t.completion_tokens for t in grades)
    assert result.usage.total_tokens == sum(t.completion_tokens for t in generated + refined)


@pytest.mark.anyio
async def test_pool_preset_counts_without_a_perfect_proof() -> None:
    GRADES.pop("rg1")
    try:
        result = await run_pool()
    finally:
        GRADES["rg1"] = "1 1 1 1"
    counts = {label: labels(result).count(label) for label in ("generate", "verify", "refine")}
    assert counts == {"generate": 16, "refine": 4 * 16, "verify": 16 * 16 * 5}
    assert result.details["stop_rule"] == "max_iterations" and result.metrics["iterations"] == 4
    assert result.metrics["proofs"] == 80 and result.answer is not None  # the best proof still answers
    refine = [t for t in result.traces if t.label == "refine"]
    assert all(len(t.parents) == 1 + 4 for t in refine)


@pytest.mark.anyio
async def test_pool_budget_stops_before_a_wave() -> None:
    result = await run_pool(pool_size=2, verifications=2, verifications_per_refinement=1, verify_budget=1)
    assert labels(result).count("refine") == 0 and result.details["stop_rule"] == "verify_budget"
    assert result.answer is not None  # deepseek_math answers with its best proof
