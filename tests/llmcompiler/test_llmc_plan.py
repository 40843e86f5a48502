"""The plan grammar: whole and streaming parsing, malformed plans, argument substitution (no event loop)."""

from __future__ import annotations

import pytest

from strategies.llmcompiler.plan import PlanParser, parse_arguments, parse_plan, references, substitute
from strategies.llmcompiler.prompts import parse_join

TOOLS = {"lookup", "calculator"}

GOOD = """Thought: both heights at once.
1. lookup("Mount Everest")
2. lookup(query="K2")
Thought: then subtract.
3. calculator("${1} - $2")
4. join()<END_OF_PLAN>
this text after the end marker is ignored"""


def test_whole_plan_parses_actions_dependencies_and_thoughts() -> None:
    plan = parse_plan(GOOD, TOOLS)
    assert plan.ok, plan.errors
    assert [(t.idx, t.name, t.deps) for t in plan.tasks] == [
        (1, "lookup", ()),
        (2, "lookup", ()),
        (3, "calculator", (1, 2)),
        (4, "join", (1, 2, 3)),
    ]
    assert plan.tasks[0].args == ("Mount Everest",) and plan.tasks[1].kwargs == {"query": "K2"}
    assert plan.tasks[0].thought == "both heights at once." and plan.tasks[2].thought == "then subtract."


def test_streaming_emits_each_action_when_its_line_is_complete() -> None:
    parser = PlanParser(TOOLS)
    emitted: list[tuple[int, int]] = []  # (task idx, characters seen when it was emitted)
    for end in range(1, len(GOOD) + 1):
        emitted += [(t.idx, end) for t in parser.feed(GOOD[:end])]
    parser.close(GOOD)
    assert [idx for idx, _ in emitted] == [1, 2, 3, 4]
    for idx, seen in emitted:
        line = next(ln for ln in GOOD.splitlines() if ln.startswith(f"{idx}."))
        assert seen == GOOD.index(line) + len(line) + 1  # right after that line's newline, not later
    assert parser.done and not parser.errors


def test_streaming_and_whole_agree_on_the_last_unterminated_line() -> None:
    text = '1. calculator("2+2")\n2. join()'
    parser = PlanParser(TOOLS)
    assert [t.idx for t in parser.feed(text)] == [1]
    assert [t.idx for t in parser.close(text)] == [2]
    assert [t.idx for t in parse_plan(text, TOOLS).tasks] == [1, 2]


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ('1. search("x")\n2. join()', "unknown_tool"),
        ('1. calculator("$1 + 1")\n2. join()', "cycle"),
        ('1. calculator("$2")\n2. calculator("$1")\n3. join()', "cycle"),
        ('1. calculator("$2")\n2. calculator("1")\n3. join()', "forward_reference"),
        ('1. calculator("1")\n2. calculator("$7 * 2")\n3. join()', "missing_reference"),
        ('1. calculator("1")\n2. join()\n3. join()', "two_joins"),
        ('1. calculator("1")\n2. join()\n3. calculator("2")', "action_after_join"),
        ('1. calculator("1")\nI will now add the numbers.\n2. join()', "junk"),
        ('2. calculator("1")\n2. calculator("2")\n3. join()', "bad_id"),
        ("", "empty_plan"),
    ],
)
def test_malformed_plans_are_reported_by_kind(text: str, kind: str) -> None:
    plan = parse_plan(text, TOOLS)
    assert not plan.ok
    assert plan.errors[0].kind == kind, plan.errors
    assert str(plan.errors[0])  # readable for the replan prompt and the failure message


def test_streaming_reports_the_first_problem_as_soon_as_its_line_ends() -> None:
    parser = PlanParser(TOOLS)
    text = '1. calculator("1")\n'
    assert [t.idx for t in parser.feed(text)] == [1]  # feed takes everything generated so far
    text += '2. nosuchtool("x")\n'
    assert parser.feed(text) == [] and parser.errors[0].kind == "unknown_tool"


def test_missing_join_is_tolerated_but_an_empty_plan_is_not() -> None:
    assert parse_plan('1. calculator("1+1")', TOOLS).ok
    assert parse_plan("Thought: nothing to do", TOOLS).errors[0].kind == "empty_plan"


def test_references_and_substitution_of_several_in_one_argument() -> None:
    assert references("$1 + ${2} * $12 - ${12}") == [1, 2, 12, 12]
    observations = {1: "10", 2: "3", 12: "7", 3: "$1"}
    assert substitute("$1 + ${2} * $12 - ${12}", observations) == "10 + 3 * 7 - 7"
    nested = substitute(("max($1, $2)", ["$3", {"k": "${12}"}], 5), observations)
    assert nested == ("max(10, 3)", ["$1", {"k": "7"}], 5)  # "$1" from an observation is not re-substituted


def test_arguments_are_literals_or_one_raw_string() -> None:
    assert parse_arguments('"a", 2, [1, "$1"], k=True') == (("a", 2, [1, "$1"]), {"k": True})
    assert parse_arguments("$1 + $2") == (("$1 + $2",), {})
    assert parse_arguments("__import__('os').system('x')") == (("__import__('os').system('x')",), {})
    assert parse_arguments("") == ((), {})


def test_joiner_decisions() -> None:
    finish = parse_join("Thought: both found.\nAction: Finish(238)")
    assert (finish.thought, finish.answer, finish.replan) == ("both found.", "238", False)
    assert parse_join('Thought: ok\nAction: Finish("Paris")').answer == "Paris"
    assert parse_join("Thought: K2 is missing\nAction: Replan(find K2)").replan
    assert parse_join("I think the answer is 4").replan  # no action: ask again (or fail in the last round)
