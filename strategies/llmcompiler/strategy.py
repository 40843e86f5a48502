"""LLMCompiler (Kim et al., ICML 2024): plan a DAG of tool calls, run it in parallel, join, maybe replan.

One round: the planner streams a numbered plan; each action is dispatched to the task
fetching unit as soon as its line is complete; when the plan and every action are done,
the joiner reads the observations and answers or asks for a new plan, whose prompt then
carries the previous plan, its observations and the joiner's thought.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from pydantic import Field

from paragen import LiveSample, RunContext
from paragen.types import Problem, StrategyResult, Trace
from strategies.llmcompiler import prompts
from strategies.llmcompiler.base import ToolConfig, ToolStrategy
from strategies.llmcompiler.plan import END_OF_PLAN, PlanError, PlanParser, Task
from strategies.llmcompiler.scheduler import TaskFetchingUnit, critical_path_s
from strategies.llmcompiler.tools import Tool


class LLMCompilerConfig(ToolConfig):
    max_replans: int = Field(
        default=1,
        ge=1,
        le=10,
        description="planning rounds, counted as the reference code does: 1 = plan once (its benchmarks)",
    )
    stream_plan: bool = Field(
        default=True, description="dispatch each action as soon as its line is complete"
    )
    planner_temperature: float = Field(default=0.0, ge=0)
    max_plan_tokens: int = Field(default=512, gt=0)
    max_join_tokens: int = Field(default=256, gt=0)


@dataclass
class Round:
    """One plan-and-execute round as it happened."""

    planner: Trace
    tasks: dict[int, Task]
    spans: dict[int, Trace]
    errors: list[PlanError]
    started: float
    executed: float  # when the last action (or the planner) finished
    joiner: Trace | None = None
    decision: prompts.JoinDecision | None = None
    notes: list[str] = field(default_factory=list)


class LLMCompiler(ToolStrategy[LLMCompilerConfig]):
    """Plan tool calls as a DAG, execute them in parallel while planning, join the results."""

    name = "llmcompiler"
    Config = LLMCompilerConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        tools = self.resolve_tools()
        contexts: list[str] = []
        rounds: list[Round] = []
        for i in range(self.config.max_replans):
            final = i == self.config.max_replans - 1
            done = await self._round(problem, ctx, tools, contexts, final)
            rounds.append(done)
            if done.decision is not None and not done.decision.replan:
                return self._finish(ctx, rounds, done.decision.answer)
            contexts.append(_context_of(done))
            ctx.emit("llmcompiler.replan", round=i + 1, errors=[str(e) for e in done.errors])
        return self._fail(ctx, rounds)

    async def _round(
        self, problem: Problem, ctx: RunContext, tools: Mapping[str, Tool], contexts: list[str], final: bool
    ) -> Round:
        started = ctx.now()
        planner, tfu, errors = await self._plan_and_execute(problem, ctx, tools, contexts)
        done = Round(planner, tfu.tasks, tfu.spans, errors, started, ctx.now())
        if errors:
            return done  # a malformed plan is not joined: it is replanned or it fails
        pad = prompts.scratchpad(t for _, t in sorted(done.tasks.items()))
        request = ctx.request(
            messages=prompts.joiner_messages(problem.question, pad, final=final),
            temperature=0.0,
            max_tokens=self.config.max_join_tokens,
        )
        done.joiner = await ctx.sample(request, label="joiner", parents=[s.id for s in done.spans.values()])
        done.decision = prompts.parse_join(done.joiner.text) if done.joiner.is_ok else None
        if done.decision is not None and final and done.decision.replan:
            done.notes.append("the joiner asked to replan in the final round")
        return done

    async def _plan_and_execute(
        self, problem: Problem, ctx: RunContext, tools: Mapping[str, Tool], contexts: list[str]
    ) -> tuple[Trace, TaskFetchingUnit, list[PlanError]]:
        messages = prompts.planner_messages(problem.question, tools, prompts.replan_context(contexts))
        request = ctx.request(
            messages=messages,
            temperature=self.config.planner_temperature,
            max_tokens=self.config.max_plan_tokens,
            stop=(END_OF_PLAN,),
        )
        parser = PlanParser(tools)
        send, receive = anyio.create_memory_object_stream[Task](math.inf)
        tfu = TaskFetchingUnit(ctx, tools, tool_timeout_s=self.config.tool_timeout_s)
        async with ctx.concurrently() as children:
            children.start(tfu.run, receive)
            planner = await self._plan(ctx, request, parser, send, tfu)
        errors = list(parser.errors)
        if planner.status == "error":
            errors.append(PlanError("empty_plan", 0, "", f"the planner failed: {planner.error}"))
        return planner, tfu, errors

    async def _plan(
        self,
        ctx: RunContext,
        request: Any,
        parser: PlanParser,
        send: MemoryObjectSendStream[Task],
        tfu: TaskFetchingUnit,
    ) -> Trace:
        def dispatch(tasks: list[Task]) -> None:
            for task in tasks:
                if not parser.errors:  # after the first problem nothing more is started
                    send.send_nowait(task)

        def monitor(live: LiveSample) -> str | None:
            if self.config.stream_plan:
                dispatch(parser.feed(live.text()))
            if parser.errors:
                tfu.cancel()
                return "malformed plan"
            return None

        with send:
            async with ctx.fanout(request, n=1, label="planner", monitor=monitor) as fan:
                tfu.parents = [t.id for t in fan.traces]
                planner = await _only(fan)
            if not parser.errors:  # else the planner was cut off mid-line: its tail is not a plan line
                dispatch(parser.close(planner.text))
            if parser.errors or planner.status == "error":
                tfu.cancel()
        return planner

    def _finish(self, ctx: RunContext, rounds: list[Round], answer: str | None) -> StrategyResult:
        last = rounds[-1]
        text = last.joiner.text if last.joiner is not None else None
        return ctx.finish(answer, text=text, metrics=_metrics(rounds))

    def _fail(self, ctx: RunContext, rounds: list[Round]) -> StrategyResult:
        last = rounds[-1]
        if last.errors:
            why = "malformed plan: " + "; ".join(str(e) for e in last.errors[:3])
        elif last.joiner is not None and not last.joiner.is_ok:
            why = f"the joiner failed: {last.joiner.error or last.joiner.status}"
        else:
            why = "the joiner gave no Finish(answer)"
        result = ctx.finish(None, text=why, metrics=_metrics(rounds))
        return result.model_copy(update={"stop_reason": "error", "error": why})


async def _only(fan: Any) -> Trace:
    async for trace in fan:
        return trace  # type: ignore[no-any-return]
    raise AssertionError("the planner's fan-out ended without a trace")


def _context_of(done: Round) -> str:
    if done.errors:
        return prompts.malformed_plan(done.planner.text, done.errors)
    pad = prompts.scratchpad(t for _, t in sorted(done.tasks.items()))
    thought = done.decision.thought if done.decision is not None else "the results were not enough"
    return prompts.previous_plan(pad, thought)


def _metrics(rounds: list[Round]) -> dict[str, float]:
    spans = [s for r in rounds for s in r.spans.values() if s.end is not None]
    tool_time = sum(s.end - s.start for s in spans if s.end is not None)
    planner_s = sum((r.planner.end or r.planner.start) - r.planner.start for r in rounds)
    joiner_s = sum((r.joiner.end or r.joiner.start) - r.joiner.start for r in rounds if r.joiner is not None)
    return {
        "rounds": float(len(rounds)),
        "replans": float(len(rounds) - 1),
        "num_tasks": float(sum(1 for r in rounds for t in r.tasks.values() if not t.is_join)),
        "tool_errors": float(sum(1 for s in spans if s.status == "error")),
        "plan_errors": float(sum(len(r.errors) for r in rounds)),
        "tool_time_s": tool_time,
        "dag_critical_path_s": sum(critical_path_s(r.tasks, r.spans) for r in rounds),
        "planner_s": planner_s,
        "joiner_s": joiner_s,
        "execute_s": sum(r.executed - r.started for r in rounds),
    }


__all__ = ["LLMCompiler", "LLMCompilerConfig"]
