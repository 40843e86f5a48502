"""ReAct (Yao et al., 2023), LLMCompiler's sequential baseline: think, call one tool, observe, repeat.

It uses the same tools (and the same tool spans) as LLMCompiler, so the two differ only in
how calls are scheduled: one after another here, as a parallel DAG there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import anyio
from pydantic import Field

from paragen import RunContext
from paragen.types import ChatMessage, Problem, StrategyResult, TokenCount, Trace
from strategies.llmcompiler.base import ToolConfig, ToolStrategy
from strategies.llmcompiler.plan import parse_arguments
from strategies.llmcompiler.prompts import REACT_SYSTEM, clean_answer
from strategies.llmcompiler.tools import Tool, ToolInputError

_ACTION = re.compile(r"Action\s*:\s*([A-Za-z_]\w*)\s*\((.*)\)", re.IGNORECASE)
_STOP = "Observation:"


class ReActConfig(ToolConfig):
    max_steps: int = Field(default=8, ge=1, le=50)
    temperature: float = Field(default=0.0, ge=0)
    max_step_tokens: TokenCount = 256


class ReAct(ToolStrategy[ReActConfig]):
    """Thought / Action / Observation, one tool call per model call, until Finish(answer)."""

    name = "react"
    Config = ReActConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        tools = self.resolve_tools()
        system = REACT_SYSTEM.format(tools="\n".join(f"- {t.description}" for t in tools.values()))
        transcript = ""
        parents: list[int] = []
        for steps in range(1, self.config.max_steps + 1):
            step = await self._think(ctx, system, problem.question, transcript, parents)
            if not step.is_ok:
                break
            text = step.text.split(_STOP)[0].rstrip()
            action = _last_action(text)
            if action is not None and action[0].lower() == "finish":
                return ctx.finish(
                    clean_answer(action[1]), text=transcript + text, metrics={"steps": float(steps)}
                )
            observation, span = await self._act(ctx, tools, action, step.id)
            parents = [step.id, *([span.id] if span is not None else [])]
            transcript += f"{text}\nObservation: {observation}\n"
        why = f"no Finish(answer) within {self.config.max_steps} steps"
        result = ctx.finish(
            None, text=f"{transcript}[{why}]", metrics={"steps": float(self.config.max_steps)}
        )
        return result.model_copy(update={"stop_reason": "error", "error": why})

    async def _think(
        self, ctx: RunContext, system: str, question: str, transcript: str, parents: list[int]
    ) -> Trace:
        user = f"Question: {question}" + (f"\n\nYour steps so far:\n{transcript}" if transcript else "")
        messages = [ChatMessage(role="system", content=system), ChatMessage(role="user", content=user)]
        request = ctx.request(
            messages=messages,
            temperature=self.config.temperature,
            max_tokens=self.config.max_step_tokens,
            stop=(_STOP,),
        )
        return await ctx.sample(request, label="react", parents=parents)

    async def _act(
        self, ctx: RunContext, tools: Mapping[str, Tool], action: tuple[str, str] | None, parent: int
    ) -> tuple[str, Trace | None]:
        if action is None:
            return "Invalid format: write Action: <tool>(<arguments>) or Action: Finish(<answer>).", None
        name, raw = action
        if name not in tools:
            return f"There is no tool {name!r}. Tools: {', '.join(tools)}.", None
        args, kwargs = parse_arguments(raw)
        async with ctx.tool_span(f"tool:{name}", args=list(args), kwargs=kwargs) as span:
            span.parents = [parent]
            span.text = await _observe(tools[name], args, kwargs, span, self.config.tool_timeout_s)
        return span.text, span


async def _observe(
    tool: Tool, args: tuple[Any, ...], kwargs: dict[str, Any], span: Trace, timeout_s: float
) -> str:
    try:
        with anyio.fail_after(timeout_s):
            return await tool(args, kwargs)
    except ToolInputError as exc:
        message = str(exc)
    except TimeoutError:
        message = f"{tool.name} timed out after {timeout_s:g}s"
    except Exception as exc:  # a plugin tool's bug must not take the run down
        message = f"{tool.name} failed: {type(exc).__name__}: {exc}"
    span.status, span.error = "error", message
    return f"Error: {message}"


def _last_action(text: str) -> tuple[str, str] | None:
    found = list(_ACTION.finditer(text))
    return (found[-1].group(1), found[-1].group(2)) if found else None


__all__ = ["ReAct", "ReActConfig"]
