"""Scripted planners and timed tools shared by the LLMCompiler tests."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import anyio
from pydantic import BaseModel

from paragen.backends.scripted import Script, ScriptedBackend
from paragen.types import GenerateRequest
from strategies.llmcompiler.tools import Tool, tool
from strategies.llmcompiler.tools.calculator import calculator


class WaitArgs(BaseModel):
    seconds: float
    value: str = "ok"


@tool("wait", "wait(seconds, value) -> value, after that many seconds")
async def wait(args: WaitArgs) -> str:
    await anyio.sleep(args.seconds)
    return args.value


TOOLBOX: Mapping[str, Tool] = {"wait": wait, "calculator": calculator}


def role_responder(
    plans: list[str], joins: list[str], *, token_delay: float = 0.0, seen: list[GenerateRequest] | None = None
) -> Callable[[GenerateRequest, int], Script]:
    """Planner requests get the next plan, joiner requests the next joiner reply (the last one repeats)."""
    counters = {"plan": 0, "join": 0}

    def respond(request: GenerateRequest, index: int) -> Script:
        if seen is not None:
            seen.append(request)
        system = request.messages[0].content if request.messages else ""
        role, table = ("plan", plans) if system.startswith("Make a plan") else ("join", joins)
        text = table[min(counters[role], len(table) - 1)]
        counters[role] += 1
        return Script(text=text, token_delay=token_delay)

    return respond


def backend(plans: list[str], joins: list[str], **kwargs: object) -> ScriptedBackend:
    return ScriptedBackend(role_responder(plans, joins, **kwargs))  # type: ignore[arg-type]
