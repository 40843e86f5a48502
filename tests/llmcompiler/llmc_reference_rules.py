"""LLMCompiler's decision rules as the authors' code makes them, restated for differential tests.

Read from SqueezeAILab/LLMCompiler (``src/llm_compiler/output_parser.py``, ``planner.py``,
``task_fetching_unit.py``, ``llm_compiler.py``, at its newest commit); written independently of
paragen's code, so a test comparing the two fails when paragen drifts. Where the reference code
crashes (a tool it does not know, a dependency on an id no action has), these functions raise
``RefCrash``: there is no decision to compare, and the tests check paragen's own account instead.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

END = "<END_OF_PLAN>"


class RefCrash(Exception):
    """The reference code raises here (OutputParserException, KeyError)."""


@dataclass
class RefTask:
    idx: int
    name: str
    args: tuple[Any, ...]
    deps: list[int]
    thought: str
    observation: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def ref_arguments(raw: str) -> tuple[Any, ...]:
    """``_parse_llm_compiler_action_args``: "" is none; a literal list/tuple is the arguments, any
    other literal one argument; what ``literal_eval`` refuses is the raw text, one argument."""
    if raw == "":
        return ()
    try:
        value = ast.literal_eval(raw)
    except Exception:
        return (raw,)
    return tuple(value) if isinstance(value, list | tuple) else (value,)


def ref_dependencies(idx: int, name: str, raw: str) -> list[int]:
    """``_get_dependencies_from_graph``: join waits on 1..idx-1; an action on each id below its own
    that ``$k`` / ``${k}`` names in its argument text."""
    if name == "join":
        return list(range(1, idx))
    named = {int(k) for k in re.findall(r"\$\{?(\d+)\}?", raw)}
    return [i for i in range(1, idx) if i in named]


def _task(idx: int, name: str, raw: str, thought: str, tools: Iterable[str]) -> RefTask:
    if name != "join" and name not in set(tools):
        raise RefCrash(f"Tool {name} not found.")
    return RefTask(idx, name, ref_arguments(raw), ref_dependencies(idx, name, raw), thought)


def ref_parse_whole(text: str, tools: Iterable[str]) -> dict[int, RefTask]:
    """``LLMCompilerPlanParser.parse`` (the non-streaming mode): every match of an optional
    ``Thought:`` line then ``<id>. <name>(<args>)`` anywhere in the text, until the first join."""
    pattern = r"(?:Thought: ([^\n]*)\n)?\n*(\d+)\. (\w+)\((.*)\)(\s*#\w+\n)?"
    graph: dict[int, RefTask] = {}
    for thought, idx, name, raw, _ in re.findall(pattern, text + "\n"):
        task = _task(int(idx), name, raw, thought, tools)
        graph[task.idx] = task
        if name == "join":
            break
    return graph


def ref_parse_stream(tokens: Sequence[str], tools: Iterable[str]) -> list[RefTask]:
    """``StreamingGraphParser`` fed token by token, as the planner's callback does; the task queue is
    closed after a join, so the task fetching unit sees nothing after it."""
    buffer, thought, out = "", "", []

    def match() -> RefTask | None:
        nonlocal thought
        if found := re.match(r"Thought: ([^\n]*)", buffer):
            thought = found.group(1)
        elif found := re.match(r"\n*(\d+)\. (\w+)\((.*)\)(\s*#\w+\n)?", buffer):
            task = _task(int(found[1]), found[2], found[3], thought, tools)
            thought = ""
            return task
        return None

    for token in [*tokens, None]:
        if token is None:  # on_llm_end: finalize
            buffer += "\n"
            task = match()
        elif "\n" in token:
            prefix, suffix = token.split("\n", 1)
            buffer += prefix.strip() + "\n"
            task = match()
            buffer = suffix
        else:
            buffer += token
            continue
        if task is not None:
            out.append(task)
            if task.name == "join":
                break
    return out


def ref_substitute(args: Sequence[Any], deps: Sequence[int], observations: Mapping[int, str]) -> list[Any]:
    """``_replace_arg_mask_with_real_value``: in strings (inside lists and tuples too), for each
    dependency from the highest id down, ``${k}`` then ``$k`` replaced by its observation."""

    def one(value: Any) -> Any:
        if isinstance(value, list | tuple):
            return type(value)(one(v) for v in value)
        if isinstance(value, str):
            for dep in sorted(deps, reverse=True):
                for mask in (f"${{{dep}}}", f"${dep}"):
                    if mask in value and observations.get(dep) is not None:
                        value = value.replace(mask, str(observations[dep]))
        return value

    return [one(a) for a in args]


def ref_check_runnable(tasks: Mapping[int, RefTask]) -> None:
    """The task fetching unit reads ``tasks_done[d]`` for every dependency: one no task has raises."""
    for task in tasks.values():
        for dep in task.deps:
            if dep not in tasks:
                raise RefCrash(f"KeyError: {dep}")


def ref_parse_joiner(text: str) -> tuple[str, str, bool]:
    """``_parse_joinner_output``: line by line, the last ``Action:`` line gives the answer (from the
    first "(" to the first ")") and the replan flag ("Replan" in it); the last ``Thought:`` line the
    thought. No action line: answer "", no replan."""
    thought, answer, replan = "", "", False
    for line in text.split("\n"):
        if line.startswith("Action:"):
            answer = line[line.find("(") + 1 : line.find(")")]
            replan = "Replan" in line
        elif line.startswith("Thought:"):
            thought = line.split("Thought:")[1].strip()
    return thought, answer, replan


@dataclass
class RefRun:
    answer: str
    joiner_inputs: list[list[str]]  # per round: the observations the joiner's scratchpad holds


def ref_loop(rounds: Sequence[Sequence[str]], joiner_replies: Sequence[str], max_replans: int) -> RefRun:
    """``LLMCompiler._acall`` given each round's observations and the joiner's replies: the
    scratchpad grows by every round's actions; a Replan in the last round is not a replan, so its
    text is the answer; the loop ends at the first non-replan."""
    scratchpad: list[str] = []
    inputs: list[list[str]] = []
    answer = ""
    for i in range(max_replans):
        scratchpad += list(rounds[i])
        inputs.append(list(scratchpad))
        _, answer, replan = ref_parse_joiner(joiner_replies[i])
        if i == max_replans - 1:
            replan = False
        if not replan:
            break
    return RefRun(answer, inputs)
