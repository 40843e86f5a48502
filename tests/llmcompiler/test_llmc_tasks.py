"""The tool benchmarks: Game of 24 grading, the bundled LLMCompiler sets, the synthetic task's script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evals.tasks.game24 import check_24, load_game24
from evals.tasks.llmcompiler_sets import SETS, grade, load_set, strategy_options
from evals.tasks.synthetic import default_task, plan_text
from paragen.errors import ConfigError
from strategies.llmcompiler.plan import parse_plan


def test_game24_loads_the_tot_test_rows() -> None:
    problems = load_game24()
    assert len(problems) == 100 and problems[0].id == "game24-900"
    assert len(problems[0].meta["numbers"]) == 4 and "24" in problems[0].question
    assert len(load_game24(None)) == 1362


@pytest.mark.parametrize(
    ("answer", "ok"),
    [
        ("8 / (3 - 8 / 3)", True),
        ("(3 - 8/3) ** -1 * 8", False),  # a power is not one of the four operations
        ("8 / (3 - 8 / 3) = 24", True),
        ("8 * 3", False),  # not every number used
        ("8 / (3 - 8 / 3) + 0", False),  # an extra number
        ("8 / (3 - 3 / 8)", False),  # wrong value
        ("__import__('os')", False),
        ("8 / (3 - 8 / (3 - 3))", False),
        (None, False),
    ],
)
def test_game24_answers_are_checked_by_exact_evaluation(answer: str | None, ok: bool) -> None:
    assert check_24(answer, [3, 3, 8, 8]) is ok


def test_llmcompiler_sets_are_bundled_and_graded_like_the_reference() -> None:
    counts = {name: len(load_set(name)) for name in SETS}
    assert counts == {"hotpotqa_comparison": 1487, "movie_recommendation": 500, "parallelqa": 113}
    assert load_set("parallelqa", 2)[0].meta["branch"] == 2
    assert grade("The Mariana Trench.", "Mariana Trench") and grade("104", "100") and not grade("111", "100")
    with pytest.raises(ConfigError, match="document store"):
        strategy_options(None)


def test_synthetic_plan_is_well_formed_and_fully_parallel() -> None:
    task = default_task(width=4, problems=1)
    plan = parse_plan(plan_text(task.keys[0]), {"fetch", "calculator"})
    assert plan.ok and [t.deps for t in plan.tasks[:4]] == [()] * 4 and plan.tasks[4].deps == (1, 2, 3, 4)


def _script(text: str) -> str:
    return json.dumps({"text": text}) + "\n"


def test_game24_runs_by_name_through_paragen_eval(tmp_path: Path) -> None:
    """`paragen eval -t game24 -s llmcompiler`: the harness finds the tool task, LLMCompiler plans and
    calls its calculator, and the task's own grader (exact evaluation) scores the expression."""
    plan = 'Thought: one expression.\n1. calculator("{expr}")\n2. join()<END_OF_PLAN>'
    join = "Thought: that makes it.\nAction: Finish({expr})"
    right, wrong = "(10 - 6) * 5 + 4", "1 + 2 + 4 + 7"  # puzzle 900 is 4 5 6 10; 901 is 1 2 4 7
    scripts = tmp_path / "model.jsonl"  # one problem at a time: planner, joiner, planner, joiner
    scripts.write_text("".join(_script(t.format(expr=e)) for e in (right, wrong) for t in (plan, join)))
    out = tmp_path / "run"
    args = ["eval", "-t", "game24", "-s", "llmcompiler", "-b", f"scripted:{scripts}", "--limit", "2"]
    args += ["-O", 'llmcompiler.tools=["calculator"]', "--max-concurrent", "1", "--out", str(out)]
    args += ["-O", "llmcompiler.join_answer=balanced"]  # the answer is an expression: "(10 - 6) * 5 + 4"
    args += ["--no-progress", "--no-plot"]
    code = "import sys; from paragen.cli import main; main(sys.argv[1:])"
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    outcomes = {r["problem"]["id"]: (r["result"]["answer"], r["grade"]["correct"]) for r in records}
    assert outcomes == {"game24-900": (right, True), "game24-901": (wrong, False)}
    tools = [t for t in records[0]["result"]["traces"] if t["kind"] == "tool"]
    assert [t["label"] for t in tools] == ["tool:calculator"] and tools[0]["text"] == "24"


def test_tool_tasks_resolve_by_name_without_importing_the_strategy() -> None:
    code = (
        "import sys\n"
        "from evals.tasks import get_task, load_problems, task_names\n"
        "assert {'game24', 'parallelqa'} <= set(task_names())\n"
        "task = get_task('parallelqa')\n"
        "assert task.equivalence('Mariana Trench.', 'mariana trench')\n"
        "assert load_problems(task)[0].gold\n"
        "print(sorted(m for m in sys.modules if m.startswith(('strategies', 'paragen.backends.scripted'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
