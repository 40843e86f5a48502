"""A synthetic parallel-tool task whose tools have known latencies, with a scripted planner.

The question asks for the sum of several values, each fetched by a slow tool call. A
scripted model writes the plan (LLMCompiler), the steps (ReAct) and the final answer,
with fixed token delays, so the speedup of parallel over sequential tool calling and how
close LLMCompiler gets to the ideal critical path are measurable without a strong model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
from pydantic import BaseModel

from paragen.types import GenerateRequest, Problem
from strategies.llmcompiler.tools import Tool, tool

if TYPE_CHECKING:
    from paragen.backends.scripted import Script, ScriptedBackend

# The scripted backend and LLMCompiler's plan syntax and calculator are imported where they are used:
# importing this module (to list or load tasks) must not pull in a test double or a strategy's insides.


class FetchArgs(BaseModel):
    key: str


@tool("fetch", 'fetch(key: str) -> str: the number stored under key, e.g. fetch("alpha"). It is slow.')
async def fetch(args: FetchArgs, *, latencies: Mapping[str, float] | None = None) -> str:
    latency = (latencies or {}).get(args.key, 0.1)
    await anyio.sleep(latency)
    return str(value_of(args.key))


def value_of(key: str) -> int:
    """The number stored under ``key`` (deterministic, so graders and scripts agree)."""
    return sum(ord(c) for c in key) % 97


# ReAct's step ends where the tool's observation will come; its requests stop there.
OBSERVATION = "Observation:"


@dataclass
class SyntheticTask:
    """Problems, tools and a scripted backend with known timings.

    ``token_delay`` and ``first_delay`` are the model's per-token time and time to first token;
    ``latencies`` the fetch tool's per-key latency.
    """

    keys: list[list[str]]
    latencies: dict[str, float]
    token_delay: float = 0.004
    first_delay: float = 0.05
    streams: list[str] = field(default_factory=list)

    def problems(self) -> list[Problem]:
        return [
            Problem(
                id=f"synthetic-{i}",
                question=question(keys),
                gold=str(total(keys)),
                meta={"task": "synthetic_parallel"},
            )
            for i, keys in enumerate(self.keys)
        ]

    def toolbox(self) -> dict[str, Tool]:
        from strategies.llmcompiler.tools.calculator import calculator

        return {"fetch": fetch.bind(latencies=self.latencies), "calculator": calculator}

    def backend(self) -> ScriptedBackend:
        from paragen.backends.scripted import ScriptedBackend

        return ScriptedBackend(self.respond)

    def script(self, text: str) -> Script:
        from paragen.backends.scripted import Script

        return Script(text=text, token_delay=self.token_delay, first_delay=self.first_delay)

    def respond(self, request: GenerateRequest, index: int) -> Script:
        """The model's reply, told apart by the request's stop words, not by any prompt's wording: the
        planner stops at the plan's end, a ReAct step at the observation, the joiner at neither."""
        from strategies.llmcompiler.plan import END_OF_PLAN

        user = (request.messages or ())[-1].content
        keys = self._keys_asked(user)
        stop = request.params.stop
        if END_OF_PLAN in stop:
            return self.script(plan_text(keys))
        if OBSERVATION in stop:
            return self.script(react_step(keys, user))
        return self.script(finish_text(_last_observation(user)))

    def _keys_asked(self, user: str) -> list[str]:
        """The keys of the task's own question that ``user`` holds (none when it holds none)."""
        return next((keys for keys in self.keys if question(keys) in user), [])

    def ideal_llmcompiler_s(self, keys: list[str]) -> float:
        """The best wall time streaming LLMCompiler can reach: plan lines dispatched as they complete."""
        from paragen.backends.scripted import tokenize
        from strategies.llmcompiler.plan import END_OF_PLAN

        text = plan_text(keys)
        line_done = _line_times(text, self.token_delay, self.first_delay)
        fetched = [line_done[i] + self.latencies.get(k, 0.1) for i, k in enumerate(keys)]
        sum_done = max(line_done[len(keys)], *fetched)  # the calculator call is instant
        planner_end = self.first_delay + (len(tokenize(text.split(END_OF_PLAN)[0])) - 1) * self.token_delay
        return max(sum_done, planner_end) + self._duration(finish_text(str(total(keys))))

    def _duration(self, text: str) -> float:
        from paragen.backends.scripted import tokenize

        return self.first_delay + (len(tokenize(text)) - 1) * self.token_delay


def question(keys: list[str]) -> str:
    return f"What is the sum of the numbers stored under these keys: {', '.join(keys)}."


def total(keys: list[str]) -> int:
    return sum(value_of(k) for k in keys)


def finish_text(answer: str) -> str:
    """The joiner's reply: the last observation it was shown (the calculator's sum, when every tool
    call worked), so a plan that went wrong ends in a wrong answer."""
    return f"Thought: the sum is computed.\nAction: Finish({answer})"


def plan_text(keys: list[str]) -> str:
    from strategies.llmcompiler.plan import END_OF_PLAN

    lines = ["Thought: every value can be fetched at once."]
    lines += [f'{i}. fetch("{k}")' for i, k in enumerate(keys, 1)]
    refs = " + ".join(f"${i}" for i in range(1, len(keys) + 1))
    lines.append(f'{len(keys) + 1}. calculator("{refs}")')
    lines.append(f"{len(keys) + 2}. join(){END_OF_PLAN}")
    return "\n".join(lines)


def react_step(keys: list[str], user: str) -> str:
    seen = user.count(OBSERVATION)
    if seen < len(keys):
        return f'Thought: I need the value of {keys[seen]}.\nAction: fetch("{keys[seen]}")\n{OBSERVATION}'
    if seen == len(keys):
        values = re.findall(rf"{OBSERVATION} (-?\d+)", user)
        return f'Thought: now add them.\nAction: calculator("{" + ".join(values)}")\n{OBSERVATION}'
    return f"Thought: I have the sum.\nAction: Finish({_last_observation(user)})"


def _last_observation(text: str) -> str:
    found = re.findall(rf"{OBSERVATION} (.*)", text)
    return found[-1].strip() if found else "unknown"


def _line_times(text: str, token_delay: float, first_delay: float) -> list[float]:
    """When each line of ``text`` is complete: the token that opens the next line has arrived."""
    from paragen.backends.scripted import tokenize

    times, pos = [], 0
    for i, token in enumerate(tokenize(text)):
        if "\n" in token and pos > 0:
            times.append(first_delay + i * token_delay)
        pos += len(token)
    return times[1:]  # the first line is the thought


def default_task(width: int = 5, problems: int = 3) -> SyntheticTask:
    """``problems`` questions over ``width`` keys each, with latencies between 0.15 and 0.35 s."""
    names = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
    keys = [[f"{names[(p + j) % len(names)]}{p}" for j in range(width)] for p in range(problems)]
    latencies = {k: 0.15 + 0.05 * (j % 5) for row in keys for j, k in enumerate(row)}
    return SyntheticTask(keys=keys, latencies=latencies)


__all__ = [
    "SyntheticTask",
    "default_task",
    "fetch",
    "finish_text",
    "plan_text",
    "question",
    "react_step",
    "value_of",
]
