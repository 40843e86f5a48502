"""The plan grammar, an incremental (streaming) parser for it, and argument substitution.

A plan is numbered lines, one action each, ending with ``join()`` and an end marker::

    Thought: the two lookups do not depend on each other.
    1. lookup("Mount Everest")
    2. lookup("K2")
    3. calculator("$1 - ${2}")
    4. join()<END_OF_PLAN>

The parser reads what the reference code (SqueezeAILab/LLMCompiler, ``output_parser.py`` and the
streaming parser of ``planner.py``) reads: a line ``<id>. <tool>(<arguments>)`` is an action, its
arguments everything between the first ``(`` and the last ``)`` of the line (so a trailing
``# comment`` is dropped); ``Thought: ...`` attaches to the next action; every other line (prose,
code fences) is skipped; nothing after ``join()`` is read. ``$k`` / ``${k}`` stands for the
observation of action k; an action depends on the actions it references with a smaller id, and
``join()`` on every action before it. A reference to the action's own or a later id is no
dependency: it stays in the text, as in the reference code.

Where the reference code crashes (a tool it does not know, a reference to a smaller id that no
action above has: its scheduler raises ``KeyError``), paragen refuses that one action: it is not
run, and its observation is one line saying why, so the joiner sees it and may replan. The parser
is pure (no event loop): :meth:`PlanParser.feed` takes the text generated so far and returns the
actions whose lines became complete, so execution can start while the plan is still written.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

END_OF_PLAN = "<END_OF_PLAN>"
JOIN = "join"

# The reference's action pattern, read at the start of a line: one space after the dot, the
# arguments up to the line's last ")" (whatever follows it, a comment say, is dropped).
_ACTION = re.compile(r"^(\d+)\. (\w+)\((.*)\)")
_THOUGHT = re.compile(r"^Thought\s*:\s*(.*)$", re.IGNORECASE)
_REF = re.compile(r"\$\{(\d+)\}|\$(\d+)(?!\d)")

ArgumentStyle = Literal["reference", "python"]
ProblemKind = Literal["unknown_tool", "missing_reference", "duplicate_id", "planner_failed"]


@dataclass
class Task:
    """One action of a plan; ``observation`` is filled in when it has run.

    ``refused`` says, in one line, why paragen does not run an action the reference code would
    crash on; such an action's observation is that line.
    """

    idx: int
    name: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    deps: tuple[int, ...] = ()
    line: str = ""
    thought: str | None = None
    observation: str | None = None
    error: str | None = None
    refused: str | None = None

    @property
    def is_join(self) -> bool:
        return self.name == JOIN


@dataclass(frozen=True)
class PlanError:
    """A line paragen refuses (or a planner that failed), pointing at it (1-based line number)."""

    kind: ProblemKind
    line_no: int
    line: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line_no} ({self.kind}): {self.message}: {self.line!r}"


def references(text: str) -> list[int]:
    """Every ``$k`` / ``${k}`` id in ``text``, in order of appearance."""
    return [int(m[1] or m[2]) for m in _REF.finditer(text)]


def substitute(value: Any, observations: Mapping[int, str]) -> Any:
    """Replace the references in ``value`` (strings, nested in lists and tuples) by observations.

    Only ids in ``observations`` (the action's dependencies) are replaced; any other reference
    stays as written. As in the reference code, dicts are passed as they are. One pass with one
    pattern, so ``$12`` is never read as ``$1`` followed by "2", and an observation that itself
    contains "$3" is not substituted again.
    """
    if isinstance(value, str):
        return _REF.sub(lambda m: observations.get(int(m[1] or m[2]), m[0]), value)
    if isinstance(value, list | tuple):
        return type(value)(substitute(v, observations) for v in value)
    return value


def reference_arguments(raw: str) -> tuple[Any, ...]:
    """The reference code's reading: ``ast.literal_eval`` of the whole text; a list or a tuple is
    the positional arguments, any other value is one; text that is no literal (``$1 + $2``
    unquoted, ``key="value"``) is one string argument, as written. No keyword arguments."""
    if raw == "":
        return ()
    try:
        value = ast.literal_eval(raw)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return (raw,)
    return tuple(value) if isinstance(value, list | tuple) else (value,)


def parse_arguments(raw: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Python call syntax: literal positional and keyword arguments (a list stays one argument);
    anything else (``$1 + $2`` unquoted) becomes one string argument."""
    if not raw.strip():
        return (), {}
    try:
        call = ast.parse(f"f({raw})", mode="eval").body
        assert isinstance(call, ast.Call)
        args = tuple(ast.literal_eval(a) for a in call.args)
        kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg is not None}
        return args, kwargs
    except (SyntaxError, ValueError, TypeError, AssertionError, MemoryError, RecursionError):
        return (raw.strip(),), {}


class PlanParser:
    """Incremental parser: feed it the planner's text so far, get back the newly complete actions.

    ``problems`` lists the lines refused (one line each); ``skipped`` the lines that are neither an
    action nor a thought. ``done`` is set by ``join()`` or the end marker: nothing after is read.
    """

    def __init__(self, tools: Collection[str], *, arguments: ArgumentStyle = "reference") -> None:
        self.tools = set(tools)
        self.arguments = arguments
        self.tasks: dict[int, Task] = {}
        self.problems: list[PlanError] = []
        self.skipped: list[str] = []
        self.thoughts: list[str] = []
        self.done = False
        self._pos = 0
        self._line_no = 0
        self._pending_thought: str | None = None

    def feed(self, text: str) -> list[Task]:
        """Parse the complete lines of ``text`` (everything generated so far) not parsed before."""
        end = text.rfind("\n") + 1
        if end <= self._pos:
            return []
        chunk, self._pos = text[self._pos : end], end
        return [t for line in chunk.splitlines() if (t := self._line(line)) is not None]

    def close(self, text: str) -> list[Task]:
        """The planner has finished: parse the last (unterminated) line."""
        fresh = self.feed(text)
        if not self.done and self._pos < len(text):
            last, self._pos = text[self._pos :], len(text)
            task = self._line(last)
            fresh += [task] if task is not None else []
        return fresh

    def _line(self, raw: str) -> Task | None:
        if self.done:
            return None
        self._line_no += 1
        line = raw.strip()
        if END_OF_PLAN in line:
            line, self.done = line[: line.index(END_OF_PLAN)].strip(), True
        if not line:
            return None
        thought = _THOUGHT.match(line)
        if thought:
            self._pending_thought = thought.group(1).strip()
            self.thoughts.append(self._pending_thought)
            return None
        action = _ACTION.match(line)
        if action is None:
            self.skipped.append(line)
            return None
        return self._action(int(action[1]), action[2], action[3], line)

    def _action(self, idx: int, name: str, raw: str, line: str) -> Task | None:
        if idx in self.tasks:
            self._problem("duplicate_id", line, f"id {idx} is already action {self.tasks[idx].line!r}")
            return None
        task = Task(idx=idx, name=name, line=line, thought=self._pending_thought)
        self._pending_thought = None
        if task.is_join:
            task.deps = tuple(self.tasks)
            self.done = True  # the reference reads nothing after join()
        else:
            task.args, task.kwargs = self._arguments(raw)
            wanted = sorted({d for d in references(raw) if d < idx})
            task.deps = tuple(d for d in wanted if d in self.tasks)
            task.refused = self._refusal(task, [d for d in wanted if d not in self.tasks])
        self.tasks[idx] = task
        return task

    def _arguments(self, raw: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if self.arguments == "python":
            return parse_arguments(raw)
        return reference_arguments(raw), {}

    def _refusal(self, task: Task, missing: list[int]) -> str | None:
        if task.name not in self.tools:
            known = ", ".join(sorted(self.tools))
            return self._problem(
                "unknown_tool", task.line, f"there is no tool {task.name!r} (tools: {known})"
            )
        if missing:
            ids = ", ".join(f"${d}" for d in missing)
            return self._problem("missing_reference", task.line, f"no action above it has the id of {ids}")
        return None

    def _problem(self, kind: ProblemKind, line: str, message: str) -> str:
        self.problems.append(PlanError(kind, self._line_no, line, message))
        return message


@dataclass
class Plan:
    """A whole plan as parsed: its actions in order, its thoughts, the lines refused and skipped."""

    tasks: list[Task]
    problems: list[PlanError]
    thoughts: list[str]
    skipped: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def parse_plan(text: str, tools: Collection[str], *, arguments: ArgumentStyle = "reference") -> Plan:
    """Parse a whole plan at once (the non-streaming mode); same rules as the streaming parser."""
    parser = PlanParser(tools, arguments=arguments)
    parser.close(text)
    return Plan(list(parser.tasks.values()), parser.problems, parser.thoughts, parser.skipped)


__all__ = [
    "END_OF_PLAN",
    "JOIN",
    "ArgumentStyle",
    "Plan",
    "PlanError",
    "PlanParser",
    "Task",
    "parse_arguments",
    "parse_plan",
    "reference_arguments",
    "references",
    "substitute",
]
