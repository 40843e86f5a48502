"""Grading: a table of (gold, model output, expected outcome) and every bundled reference answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from evals_helpers import ignore_timer_and_hang, spin_forever

from evals.run.grading import Grader, pre_grade
from evals.tasks import DATA_DIR
from paragen.answers import extract_answer
from paragen.types import StrategyResult, Trace

C, X, NA = "correct", "incorrect", "no_answer"

# (gold, what the model wrote, expected outcome)
CASES: list[tuple[str, str, str]] = [
    # fractions
    ("1/2", r"\boxed{\frac{1}{2}}", C),
    ("1/2", r"\boxed{0.5}", C),
    (r"\frac{1}{2}", r"\boxed{\dfrac{1}{2}}", C),
    (r"\frac{1}{2}", r"\boxed{\tfrac12}", C),
    (r"\frac{3}{4}", r"\boxed{0.75}", C),
    (r"\frac{2}{3}", r"\boxed{0.67}", X),
    (r"\frac{1}{3}", r"\boxed{\frac{2}{6}}", C),
    ("3/4", r"\boxed{4/3}", X),
    # intervals
    ("(1, 3)", r"\boxed{(1,3)}", C),
    ("[1, 3)", r"\boxed{[1,3)}", C),
    ("[1, 3)", r"\boxed{(1,3)}", X),
    (r"(-\infty, 2]", r"\boxed{(-\infty,2]}", C),
    (r"(-\infty, 2) \cup (3, \infty)", r"\boxed{(-\infty,2)\cup(3,\infty)}", C),
    (r"x \in [0, 1]", r"\boxed{[0,1]}", C),
    # units
    ("10", r"\boxed{10 \text{ cm}}", C),
    ("10", r"\boxed{10\text{ dollars}}", C),
    ("5", r"\boxed{5 \mbox{ inches}}", C),
    ("90", r"\boxed{90^\circ}", C),
    ("18", r"\boxed{\$18}", C),
    (r"25\%", r"\boxed{25}", C),
    # thousands separators and number forms
    ("1000", r"\boxed{1,000}", C),
    ("1234567", r"\boxed{1,234,567}", C),
    ("1000", r"\boxed{1000.0}", C),
    ("27", r"\boxed{27.0}", C),
    ("25", r"\boxed{025}", C),
    # negative numbers
    ("-10", r"\boxed{-10}", C),
    ("-3", r"\boxed{3}", X),
    (r"-\frac{1}{2}", r"\boxed{-0.5}", C),
    ("-5", r"\boxed{- 5}", C),
    # LaTeX variants
    (r"\sqrt{2}", r"\boxed{\sqrt2}", C),
    (r"2\sqrt{3}", r"\boxed{\sqrt{12}}", C),
    (r"\pi", r"\boxed{\pi}", C),
    (r"\frac{\pi}{2}", r"\boxed{\pi/2}", C),
    ("x^2+2x+1", r"\boxed{(x+1)^2}", C),
    (r"\left( 3, \frac{\pi}{2} \right)", r"\boxed{(3,\frac{\pi}{2})}", C),
    (r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", r"\boxed{\begin{pmatrix}1\\2\end{pmatrix}}", C),
    (r"\text{(C)}", r"\boxed{C}", C),
    ("5", r"\boxed{\textbf{5}}", C),
    ("3", r"$\boxed{3}$", C),
    ("12", r"\fbox{12}", C),
    ("2, 3", r"\boxed{3, 2}", C),
    # several boxes: the last one counts
    ("42", r"First \boxed{7}, then finally \boxed{42}", C),
    ("7", r"First \boxed{7}, then finally \boxed{42}", X),
    # no box
    ("42", "So the answer is 42.", C),
    ("0", "Nothing is left, the answer is 0", C),
    # no answer at all
    ("42", "I do not know how to do this.", NA),
    ("42", "", NA),
    ("42", r"\boxed{}", NA),
]


def _result(text: str) -> StrategyResult:
    trace = Trace(id=0, text=text, finish_reason="stop", end=1.0)
    return StrategyResult(
        strategy="s", problem_id="p", answer=extract_answer(text), text=text, traces=[trace]
    )


def test_grading_table(grader: Grader) -> None:
    assert len(CASES) >= 40
    grades = grader.grade_many([(_result(text), gold) for gold, text, _ in CASES])
    wrong = [(c, g.outcome, g.answer) for c, g in zip(CASES, grades, strict=True) if g.outcome != c[2]]
    assert not wrong, wrong
    assert {c[2] for c in CASES} == {C, X, NA}


def test_truncation_is_told_apart_from_no_answer() -> None:
    cut = Trace(id=0, text="Let me think about", finish_reason="length", end=1.0)
    result = StrategyResult(strategy="s", problem_id="p", answer=None, traces=[cut])
    grade = pre_grade(result, "3")
    assert grade is not None and grade.outcome == "truncated"
    plain = StrategyResult(
        strategy="s", problem_id="p", answer=None, traces=[cut.model_copy(update={"finish_reason": "stop"})]
    )
    assert pre_grade(plain, "3") == pre_grade(plain, "3") and pre_grade(plain, "3").outcome == "no_answer"  # type: ignore[union-attr]


def test_backend_failure_is_an_outcome_with_its_cause() -> None:
    failed = Trace(id=0, status="error", error="BackendHTTPError: scripted HTTP 500", end=0.1)
    grade = pre_grade(StrategyResult(strategy="s", problem_id="p", answer=None, traces=[failed]), "1")
    assert grade is not None and grade.outcome == "error" and "HTTP 500" in str(grade.cause)


def test_grader_timer_stops_a_runaway_comparison() -> None:
    with Grader(workers=1, timeout_s=0.2, equivalence=spin_forever) as slow:
        assert slow.compare_many([("1", "1")]) == ["grader_timeout"]


def test_outer_limit_kills_a_wedged_worker_and_the_pool_recovers() -> None:
    with Grader(workers=1, timeout_s=0.2, equivalence=ignore_timer_and_hang, backstop_s=0.5) as wedged:
        start = time.monotonic()
        assert wedged.compare_many([("1", "1")]) == ["grader_timeout"]
        assert time.monotonic() - start < 10
        wedged.equivalence = None
        assert wedged.compare_many([("2", "2")]) == ["correct"]


BUNDLED = ("math500.jsonl", "gsm8k_test.jsonl", "aime2024.jsonl", "amc23.jsonl")


@pytest.mark.parametrize("name", BUNDLED)
def test_every_bundled_reference_answer_grades_correct(grader: Grader, name: str) -> None:
    rows = [json.loads(line) for line in (DATA_DIR / name).read_text(encoding="utf-8").splitlines()]
    pairs = [(extract_answer("\\boxed{" + r["answer"] + "}", "boxed") or "", r["answer"]) for r in rows]
    verdicts = grader.compare_many(pairs)
    misses = [(r["id"], r["answer"], v) for r, v in zip(rows, verdicts, strict=True) if v != "correct"]
    assert not misses, misses
    assert (
        len(verdicts)
        == {"math500.jsonl": 500, "gsm8k_test.jsonl": 1219, "aime2024.jsonl": 30, "amc23.jsonl": 40}[name]
    )


GRADING_PROCESS = """
import os, sys, time
from evals.run.grading import Grader
grader = Grader(workers=2)
grader.wait_started()
assert grader._pool is not None
with open(sys.argv[1] + ".tmp", "w") as out:
    out.write(" ".join(str(pid) for pid in grader._pool._processes))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
"""


def _live(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_sigkilled_grading_process_leaves_no_pool_behind(tmp_path: Path) -> None:
    """Its forkserver does not end with it (its workers hold its liveness pipe): the workers test
    the grading process's pid themselves, and the forkserver ends once they have."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    pids = tmp_path / "pids"
    grading = subprocess.Popen([sys.executable, "-c", GRADING_PROCESS, str(pids)], env=env)
    deadline = time.monotonic() + 60
    while not pids.exists() and time.monotonic() < deadline:
        assert grading.poll() is None
        time.sleep(0.05)
    workers = [int(pid) for pid in pids.read_text().split()]
    forkserver = int((Path("/proc") / str(workers[0]) / "stat").read_text().rsplit(")", 1)[1].split()[1])
    assert len(workers) == 2 and forkserver != grading.pid
    grading.kill()
    grading.wait()
    deadline = time.monotonic() + 10
    while any(_live(pid) for pid in (*workers, forkserver)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [pid for pid in (*workers, forkserver) if _live(pid)] == []
