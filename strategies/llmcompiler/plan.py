"""The plan grammar, an incremental (streaming) parser for it, and argument substitution.

A plan is numbered lines, one action each, ending with ``join()`` and an end marker::

    Thought: the two lookups do not depend on each other.
    1. lookup("Mount Everest")
    2. lookup("K2")
    3. calculator("$1 - ${2}")
    4. join()<END_OF_PLAN>

``$k`` / ``${k}`` stands for the observation of action k; an action depends on every action
it references, and ``join()`` on every action before it. Ids strictly increase. The parser is
pure (no event loop): :meth:`PlanParser.feed` takes the text generated so far and returns the
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

_ACTION = re.compile(r"^(\d+)\s*\.\s*([A-Za-z_]\w*)\s*\((.*)\)\s*[.;,]?$")
_THOUGHT = re.compile(r"^Thought\s*:\s*(.*)$", re.IGNORECASE)
_REF = re.compile(r"\$\{(\d+)\}|\$(\d+)(?!\d)")
_IGNORED = re.compile(r"^(```\w*|plan:?|current plan:?|#+\s*plan:?)$", re.IGNORECASE)

ErrorKind = Literal[
    "unknown_tool",
    "cycle",
    "forward_reference",
    "missing_reference",
    "two_joins",
    "action_after_join",
    "bad_id",
    "junk",
    "empty_plan",
]


@dataclass
class Task:
    """One action of a plan; ``observation`` is filled in when it has run."""

    idx: int
    name: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    deps: tuple[int, ...] = ()
    line: str = ""
    thought: str | None = None
    observation: str | None = None
    error: str | None = None

    @property
    def is_join(self) -> bool:
        return self.name == JOIN


@dataclass(frozen=True)
class PlanError:
    """Why a plan is malformed, pointing at the offending line (1-based)."""

    kind: ErrorKind
    line_no: int
    line: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line_no} ({self.kind}): {self.message}: {self.line!r}"


def references(text: str) -> list[int]:
    """Every ``$k`` / ``${k}`` id in ``text``, in order of appearance."""
    return [int(m[1] or m[2]) for m in _REF.finditer(text)]


def substitute(value: Any, observations: Mapping[int, str]) -> Any:
    """Replace every reference in ``value`` (strings, nested in lists/tuples/dicts) by its observation.

    One pass with one pattern, so ``$12`` is never read as ``$1`` followed by "2", and an
    observation that itself contains "$3" is not substituted again.
    """
    if isinstance(value, str):
        return _REF.sub(lambda m: observations[int(m[1] or m[2])], value)
    if isinstance(value, list | tuple):
        return type(value)(substitute(v, observations) for v in value)
    if isinstance(value, dict):
        return {k: substitute(v, observations) for k, v in value.items()}
    return value


def parse_arguments(raw: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Python-literal arguments; anything else (``$1 + $2`` unquoted) becomes one string argument."""
    if not raw.strip():
        return (), {}
    try:
        call = ast.parse(f"f({raw})", mode="eval").body
        assert isinstance(call, ast.Call)
        args = tuple(ast.literal_eval(a) for a in call.args)
        kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg is not None}
        return args, kwargs
    except (SyntaxError, ValueError, TypeError, AssertionError, RecursionError):
        return (raw.strip(),), {}


class PlanParser:
    """Incremental parser: feed it the planner's text so far, get back the newly complete actions.

    Problems are collected in ``errors`` (the first one makes the plan malformed; the
    strategy stops dispatching at once). ``done`` is set by the end marker.
    """

    def __init__(self, tools: Collection[str]) -> None:
        self.tools = set(tools)
        self.tasks: dict[int, Task] = {}
        self.rejected: list[Task] = []
        self.errors: list[PlanError] = []
        self.thoughts: list[str] = []
        self.done = False
        self._pos = 0
        self._line_no = 0
        self._pending_thought: str | None = None

    @property
    def joined(self) -> bool:
        return any(t.is_join for t in self.tasks.values())

    def feed(self, text: str) -> list[Task]:
        """Parse the complete lines of ``text`` (everything generated so far) not parsed before."""
        end = text.rfind("\n") + 1
        if end <= self._pos:
            return []
        chunk, self._pos = text[self._pos : end], end
        return [t for line in chunk.splitlines() if (t := self._line(line)) is not None]

    def close(self, text: str) -> list[Task]:
        """The planner has finished: parse the last (unterminated) line and check the plan as a whole."""
        fresh = self.feed(text)
        if not self.done and self._pos < len(text):
            last, self._pos = text[self._pos :], len(text)
            task = self._line(last)
            fresh += [task] if task is not None else []
        if not self.tasks and not self.errors:
            self._error("empty_plan", "", "the plan has no actions")
        self._relabel_forward()
        return fresh

    # -- one line --------------------------------------------------------------------------------

    def _line(self, raw: str) -> Task | None:
        if self.done:
            return None
        self._line_no += 1
        line = raw.strip()
        if END_OF_PLAN in line:
            line, self.done = line[: line.index(END_OF_PLAN)].strip(), True
        if not line or _IGNORED.match(line):
            return None
        thought = _THOUGHT.match(line)
        if thought:
            self._pending_thought = thought.group(1).strip()
            self.thoughts.append(self._pending_thought)
            return None
        action = _ACTION.match(line)
        if action is None:
            self._error("junk", line, "not an action, a thought or the end marker")
            return None
        return self._action(int(action[1]), action[2], action[3], line)

    def _action(self, idx: int, name: str, raw: str, line: str) -> Task | None:
        task = Task(idx=idx, name=name, line=line, thought=self._pending_thought)
        self._pending_thought = None
        if not self._check_order(task):
            return None
        if task.is_join:
            task.deps = tuple(sorted(self.tasks))
        else:
            task.args, task.kwargs = parse_arguments(raw)
            task.deps = tuple(dict.fromkeys(references(raw)))
            if not self._check_action(task):
                return None
        self.tasks[idx] = task
        return task

    def _check_order(self, task: Task) -> bool:
        if self.joined:
            kind: ErrorKind = "two_joins" if task.is_join else "action_after_join"
            self._error(kind, task.line, "join() must be the last action, and only one")
        elif self.tasks and task.idx <= max(self.tasks):
            self._error("bad_id", task.line, f"id {task.idx} does not increase (last was {max(self.tasks)})")
        else:
            return True
        return False

    def _check_action(self, task: Task) -> bool:
        if task.name not in self.tools:
            known = ", ".join(sorted(self.tools))
            self._error("unknown_tool", task.line, f"no tool named {task.name!r} (tools: {known})")
        elif task.idx in task.deps:
            self._error("cycle", task.line, f"action {task.idx} depends on itself")
        elif any(d > task.idx for d in task.deps):
            self._error("forward_reference", task.line, f"refers to a later action ({_later(task)})")
        elif any(d not in self.tasks for d in task.deps):
            missing = [d for d in task.deps if d not in self.tasks]
            self._error("missing_reference", task.line, f"refers to actions that do not exist: {missing}")
        else:
            return True
        self.rejected.append(task)
        return False

    def _error(self, kind: ErrorKind, line: str, message: str) -> None:
        self.errors.append(PlanError(kind, self._line_no, line, message))

    def _relabel_forward(self) -> None:
        """Seen whole, a forward reference is a cycle (it leads back) or a reference to nothing."""
        graph = {t.idx: set(t.deps) for t in [*self.tasks.values(), *self.rejected]}
        for i, err in enumerate(self.errors):
            idx = _leading_id(err.line)
            if err.kind != "forward_reference" or idx is None:
                continue
            if _reaches(graph, idx, idx):
                self.errors[i] = PlanError(
                    "cycle", err.line_no, err.line, f"action {idx} is on a dependency cycle"
                )
            elif any(d not in graph for d in graph.get(idx, ())):
                missing = sorted(d for d in graph[idx] if d not in graph)
                self.errors[i] = PlanError(
                    "missing_reference", err.line_no, err.line, f"no actions {missing}"
                )


def _later(task: Task) -> str:
    return ", ".join(f"${d}" for d in task.deps if d > task.idx)


def _leading_id(line: str) -> int | None:
    found = _ACTION.match(line)
    return int(found[1]) if found else None


def _reaches(graph: dict[int, set[int]], start: int, target: int) -> bool:
    seen: set[int] = set()
    stack = list(graph.get(start, ()))
    while stack:
        node = stack.pop()
        if node == target:
            return True
        if node not in seen:
            seen.add(node)
            stack.extend(graph.get(node, ()))
    return False


@dataclass
class Plan:
    """A whole plan as parsed: its actions in order, its thoughts, and what is wrong with it."""

    tasks: list[Task]
    errors: list[PlanError]
    thoughts: list[str]

    @property
    def ok(self) -> bool:
        return not self.errors


def parse_plan(text: str, tools: Collection[str]) -> Plan:
    """Parse a whole plan at once (the non-streaming mode); same rules as the streaming parser."""
    parser = PlanParser(tools)
    parser.close(text)
    return Plan(list(parser.tasks.values()), parser.errors, parser.thoughts)


__all__ = [
    "END_OF_PLAN",
    "JOIN",
    "Plan",
    "PlanError",
    "PlanParser",
    "Task",
    "parse_arguments",
    "parse_plan",
    "references",
    "substitute",
]
