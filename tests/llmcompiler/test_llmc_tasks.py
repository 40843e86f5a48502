"""The tool benchmarks: Game of 24 grading, the bundled LLMCompiler sets, the synthetic task's script."""

from __future__ import annotations

import pytest

from evals.tools_tasks.game24 import check_24, load_game24
from evals.tools_tasks.llmcompiler_sets import SETS, grade, load_set, strategy_options
from evals.tools_tasks.synthetic import default_task, plan_text
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
