"""The plan grammar: whole and streaming parsing, refused lines, arguments, substitution (no event loop)."""

from __future__ import annotations

import pytest

from strategies.llmcompiler.plan import (
    PlanParser,
    parse_arguments,
    parse_plan,
    reference_arguments,
    references,
    substitute,
)
from strategies.llmcompiler.prompts import parse_join

TOOLS = {"lookup", "calculator"}

GOOD = """Thought: both heights at once.
1. lookup("Mount Everest")
2. lookup("K2")
Thought: then subtract.
3. calculator("${1} - $2")
4. join()<END_OF_PLAN>
this text after the end marker is ignored"""


def test_whole_plan_parses_actions_dependencies_and_thoughts() -> None:
    plan = parse_plan(GOOD, TOOLS)
    assert plan.ok, plan.problems
    assert [(t.idx, t.name, t.deps) for t in plan.tasks] == [
        (1, "lookup", ()),
        (2, "lookup", ()),
        (3, "calculator", (1, 2)),
        (4, "join", (1, 2, 3)),
    ]
    assert plan.tasks[0].args == ("Mount Everest",) and plan.tasks[1].args == ("K2",)
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
    assert parser.done and not parser.problems


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
        ('1. calculator("1")\n3. calculator("$2 * 2")\n4. join()', "missing_reference"),
        ('2. calculator("1")\n2. calculator("2")\n3. join()', "duplicate_id"),
    ],
)
def test_lines_the_reference_crashes_on_are_refused_in_one_line(text: str, kind: str) -> None:
    plan = parse_plan(text, TOOLS)
    assert not plan.ok
    assert [e.kind for e in plan.problems] == [kind]
    assert "\n" not in str(plan.problems[0])  # one line, for the joiner and the trace
    assert plan.tasks[-1].is_join  # the rest of the plan still runs


@pytest.mark.parametrize(
    ("text", "tasks", "literal"),
    [
        ('1. calculator("$1 + 1")\n2. join()', [(1, ())], "$1 + 1"),  # its own id: no dependency
        ('1. calculator("$2")\n2. calculator("1")\n3. join()', [(1, ()), (2, ())], "$2"),
        ('1. calculator("1")\n2. calculator("$7 * 2")\n3. join()', [(1, ()), (2, ())], "$7 * 2"),
    ],
)
def test_a_reference_to_the_own_or_a_later_id_stays_as_written(
    text: str, tasks: list[tuple[int, tuple[int, ...]]], literal: str
) -> None:
    plan = parse_plan(text, TOOLS)
    assert plan.ok and [(t.idx, t.deps) for t in plan.tasks if not t.is_join] == tasks
    assert any(t.args == (literal,) for t in plan.tasks)


def test_prose_comments_and_what_follows_join_are_not_read() -> None:
    text = (
        'Here is the plan:\n```\n1. calculator("1")  # first\nI will now add.\n'
        '2. calculator("$1 + 1")\n3. join()\n4. calculator("2")\n5. join()\n```'
    )
    plan = parse_plan(text, TOOLS)
    assert plan.ok and [(t.idx, t.args) for t in plan.tasks] == [(1, ("1",)), (2, ("$1 + 1",)), (3, ())]
    assert plan.skipped == ["Here is the plan:", "```", "I will now add."]


def test_streaming_stops_reading_at_join() -> None:
    parser = PlanParser(TOOLS)
    text = '1. calculator("1")\n2. join()\n'
    assert [t.idx for t in parser.feed(text)] == [1, 2] and parser.done
    assert parser.feed(text + '3. calculator("2")\n') == []


def test_missing_join_and_an_empty_plan_are_read_as_they_are() -> None:
    assert [t.idx for t in parse_plan('1. calculator("1+1")', TOOLS).tasks] == [1]
    empty = parse_plan("Thought: nothing to do", TOOLS)
    assert empty.ok and empty.tasks == [] and empty.thoughts == ["nothing to do"]


def test_references_and_substitution_of_several_in_one_argument() -> None:
    assert references("$1 + ${2} * $12 - ${12}") == [1, 2, 12, 12]
    observations = {1: "10", 2: "3", 12: "7", 3: "$1"}
    assert substitute("$1 + ${2} * $12 - ${12}", observations) == "10 + 3 * 7 - 7"
    nested = substitute(("max($1, $2)", ["$3", ("${12}",)], 5, {"k": "$1"}), observations)
    # "$1" from an observation is not substituted again; a dict is passed as it is (the reference)
    assert nested == ("max(10, 3)", ["$1", ("7",)], 5, {"k": "$1"})
    assert substitute("$1 and $4", {1: "10"}) == "10 and $4"  # not a dependency: kept


def test_reference_arguments_spread_a_list_and_keep_keywords_as_text() -> None:
    assert reference_arguments('"a", 2') == ("a", 2)
    assert reference_arguments('["a", "b"]') == ("a", "b")
    assert reference_arguments('query="K2"') == ('query="K2"',)
    assert reference_arguments("") == ()


def test_python_arguments_are_literals_or_one_raw_string() -> None:
    assert parse_arguments('"a", 2, [1, "$1"], k=True') == (("a", 2, [1, "$1"]), {"k": True})
    assert parse_arguments("$1 + $2") == (("$1 + $2",), {})
    assert parse_arguments("__import__('os').system('x')") == (("__import__('os').system('x')",), {})
    assert parse_arguments("") == ((), {})


def test_joiner_decisions() -> None:
    finish = parse_join("Thought: both found.\nAction: Finish(238)")
    assert (finish.thought, finish.answer, finish.replan) == ("both found.", "238", False)
    assert parse_join('Thought: ok\nAction: Finish("Paris")').answer == "Paris"
    assert parse_join("Thought: K2 is missing\nAction: Replan(find K2)").replan
    assert parse_join("Thought: more\nAction: Replan(x)\nAction: Finish(4)").answer == "4"  # the last action
    no_action = parse_join("I think the answer is 4")  # no action: finished, with no answer
    assert (no_action.answer, no_action.replan) == (None, False)
