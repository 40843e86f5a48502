"""Prompts of the planner, the joiner and the ReAct baseline (our own wording); the joiner's parser."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from paragen.types import ChatMessage
from strategies.llmcompiler.plan import END_OF_PLAN, Task
from strategies.llmcompiler.tools import Tool

PLANNER_RULES = f"""Rules:
- Write one action per line as "<id>. <tool>(<arguments>)", numbering the actions 1, 2, 3, ... in order.
- Arguments are Python literals: put text in quotes. To use the result of an earlier action, write $<id> \
(or ${{<id>}}) inside an argument, for example calculator("$1 * $2").
- An action may use only the results of actions above it. Actions that do not use each other's results run \
at the same time, so never make one wait for another without need.
- You may put a line "Thought: ..." before an action. Write nothing else: no comments, no explanations.
- The last action is always join(). Write {END_OF_PLAN} right after it."""

EXAMPLES: dict[frozenset[str], str] = {
    frozenset({"lookup", "calculator"}): f"""Question: How much taller is Mount Everest than K2, in metres?
Thought: The two heights can be looked up at the same time.
1. lookup("Mount Everest")
2. lookup("K2")
Thought: Once both heights are known, subtract them.
3. calculator("8849 - 8611")
4. join(){END_OF_PLAN}""",
    frozenset({"calculator"}): f"""Question: What is (17 * 23) + (19 * 29)?
1. calculator("17 * 23")
2. calculator("19 * 29")
3. calculator("$1 + $2")
4. join(){END_OF_PLAN}""",
}

JOINER_SYSTEM = """You are given a question and the results of a plan of tool calls made to answer it. \
Decide whether the results answer the question.
Reply in exactly this form:
Thought: <one or two sentences on what the results show>
Action: Finish(<the final answer, as short as possible>)
If the results are not enough and a new plan of tool calls could find what is missing, reply instead with:
Thought: <what is missing>
Action: Replan(<what the new plan should find>)"""

FINAL_ROUND = "No new plan is possible now: you must reply with Action: Finish(...)."

REACT_SYSTEM = """Answer the question by reasoning step by step and calling one tool at a time.
Tools:
{tools}
Each step is:
Thought: <your reasoning>
Action: <tool>(<arguments as Python literals>)
Then stop: the tool's result comes back as "Observation: ...". When you know the answer, write:
Thought: <why>
Action: Finish(<the final answer, as short as possible>)"""


def planner_messages(question: str, tools: Mapping[str, Tool], context: str = "") -> list[ChatMessage]:
    """The planner's system prompt (tools, rules, an example that fits the tools) and the question."""
    listing = "\n".join(f"{i}. {tool.description}" for i, tool in enumerate(tools.values(), 1))
    join = (
        f"{len(tools) + 1}. join(): ends the plan. The results are then read to answer the question, "
        "or to make a new plan if they are not enough."
    )
    parts = [
        "Make a plan of tool calls that answers the question, running as many calls at once as possible.",
        f"Tools:\n{listing}\n{join}",
        PLANNER_RULES,
    ]
    examples = [text for needs, text in EXAMPLES.items() if needs <= set(tools)]
    if examples:
        parts.append("Example:\n" + examples[0])
    if context:
        parts.append(
            "When a previous plan is shown, do not repeat the actions it already ran; use their results."
        )
    user = f"Question: {question}" + (f"\n\n{context}" if context else "")
    return [ChatMessage(role="system", content="\n\n".join(parts)), ChatMessage(role="user", content=user)]


def scratchpad(tasks: Iterable[Task]) -> str:
    """The executed actions with their observations, as the joiner and the replanner read them."""
    lines = []
    for task in tasks:
        if task.is_join:
            continue
        if task.thought:
            lines.append(f"Thought: {task.thought}")
        lines.append(task.line)
        lines.append(f"Observation: {task.observation if task.observation is not None else '(not run)'}")
    return "\n".join(lines)


def joiner_messages(question: str, pads: Sequence[str], *, final: bool) -> list[ChatMessage]:
    """The joiner reads every round's scratchpad, oldest first, as the reference's does."""
    system = JOINER_SYSTEM + ("\n" + FINAL_ROUND if final else "")
    results = "\n\n".join(p for p in pads if p)
    user = f"Question: {question}\n\nResults:\n{results or '(no actions were run)'}"
    return [ChatMessage(role="system", content=system), ChatMessage(role="user", content=user)]


def previous_plan(pad: str, thought: str) -> str:
    """One round's context for the next plan: its actions, observations and the joiner's thought."""
    return f"Previous Plan:\n\n{pad}\n\nThought: {thought}\n"


def failed_plan(text: str, why: str) -> str:
    """A round whose planner failed: what it wrote, and why it was not run."""
    return f"Previous Plan (not run: {why}):\n\n{text.strip()}\n"


def replan_context(contexts: list[str]) -> str:
    return "\n".join(contexts) + "\nCurrent Plan:\n" if contexts else ""


@dataclass(frozen=True)
class JoinDecision:
    """What the joiner said: its thought, its answer (the text in the action's parentheses; None
    when empty) and whether it asked to replan."""

    thought: str
    answer: str | None
    replan: bool


def parse_join(text: str, *, balanced: bool = False) -> JoinDecision:
    """The reference code's reading of the joiner's reply, line by line: the last line starting
    with ``Action:`` decides (a replan when it contains "Replan", else a finish, its answer the
    text from the first "(" to the first ")" after it, or with ``balanced`` to the ")" closing that
    "("); the last line starting with ``Thought:`` is the thought. A reply with no ``Action:``
    line finishes with no answer."""
    thought, answer, replan = "", "", False
    for line in text.split("\n"):
        if line.startswith("Action:"):
            answer, replan = _in_parentheses(line, balanced), "Replan" in line
        elif line.startswith("Thought:"):
            thought = line.split("Thought:")[1].strip()
    return JoinDecision(thought, _unquoted(answer.strip()) or None, replan)


def _in_parentheses(line: str, balanced: bool) -> str:
    """From the first "(" to the first ")" after it (or the one closing it), else to the line's end;
    "" without "(".

    The reference slices ``line[find("(") + 1 : find(")")]``; where a "(" or ")" is missing that
    slice is not an answer (the line's start, or the answer's last character dropped)."""
    opened = line.find("(")
    if opened < 0:
        return ""
    depth = 0
    for i in range(opened + 1, len(line)):
        if line[i] == "(" and balanced:
            depth += 1
        elif line[i] == ")":
            if depth == 0:
                return line[opened + 1 : i]
            depth -= 1
    return line[opened + 1 :]


def _unquoted(answer: str) -> str:
    if len(answer) >= 2 and answer[0] == answer[-1] and answer[0] in "\"'":
        return answer[1:-1]
    return answer


def clean_answer(raw: str) -> str | None:
    answer = raw.strip().split("\n")[0].strip()
    if answer.endswith(")") and answer.count(")") > answer.count("("):
        answer = answer[:-1].rstrip()  # "Finish(42))" from a greedy match over a trailing paren
    if len(answer) >= 2 and answer[0] == answer[-1] and answer[0] in "\"'":
        answer = answer[1:-1]
    return answer or None


__all__ = [
    "JoinDecision",
    "clean_answer",
    "failed_plan",
    "joiner_messages",
    "parse_join",
    "planner_messages",
    "previous_plan",
    "replan_context",
    "scratchpad",
]
