"""LLMCompiler (Kim et al., ICML 2024): plan a DAG of tool calls, run it in parallel, join, maybe replan.

One round: the planner streams a numbered plan; each action is dispatched to the task
fetching unit as soon as its line is complete; when the plan and every action are done,
the joiner reads the observations of this round and every earlier one (the reference's
scratchpad) and answers or asks for a new plan, whose prompt then carries the previous plans,
their observations and the joiner's thoughts. The rules of each decision follow the reference
code (SqueezeAILab/LLMCompiler); docs/faithfulness.md lists them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from pydantic import Field

from paragen import LiveSample, RunContext
from paragen.types import Problem, StrategyResult, TokenCount, Trace
from strategies.llmcompiler import prompts
from strategies.llmcompiler.base import ToolConfig, ToolStrategy
from strategies.llmcompiler.plan import END_OF_PLAN, ArgumentStyle, PlanError, PlanParser, Task
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
    arguments: ArgumentStyle = Field(
        default="reference",
        description="how an action's arguments reach its tool: 'reference' as the reference code "
        "(ast.literal_eval of the whole text; a list or tuple spreads into positional arguments; "
        "anything else, key=\"value\" included, is one string), 'python' as a Python call "
        "(keyword arguments; a list stays one argument)",
    )
    join_answer: Literal["reference", "balanced"] = Field(
        default="reference",
        description="the answer in the joiner's Finish(...): 'reference' up to the first ')' as the "
        "reference code (so 'Finish((1 + 2) * 8)' gives '(1 + 2'), 'balanced' up to the ')' that "
        "closes the first '(' (answers that are expressions, e.g. Game of 24)",
    )
    planner_temperature: float = Field(default=0.0, ge=0)
    max_plan_tokens: TokenCount = 512
    max_join_tokens: TokenCount = 256


@dataclass
class Round:
    """One plan-and-execute round as it happened."""

    planner: Trace
    tasks: dict[int, Task]
    spans: dict[int, Trace]
    problems: list[PlanError]  # lines refused (the round still runs the rest and is joined)
    started: float
    executed: float  # when the last action (or the planner) finished
    failure: str | None = None  # the planner failed: no plan, no join
    joiner: Trace | None = None
    decision: prompts.JoinDecision | None = None

    @property
    def pad(self) -> str:
        """Thought / action / observation of every action, in the order the planner wrote them."""
        return prompts.scratchpad(self.tasks.values())


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
            done = await self._round(problem, ctx, tools, contexts, [r.pad for r in rounds], final)
            rounds.append(done)
            decision = done.decision
            # as the reference: in the last round a Replan is an answer too, its text in parentheses
            if decision is not None and (final or not decision.replan):
                return self._finish(ctx, rounds, decision.answer)
            contexts.append(_context_of(done))
            ctx.emit("llmcompiler.replan", round=i + 1, problems=[str(e) for e in done.problems])
        return self._fail(ctx, rounds)

    async def _round(
        self,
        problem: Problem,
        ctx: RunContext,
        tools: Mapping[str, Tool],
        contexts: list[str],
        earlier_pads: list[str],
        final: bool,
    ) -> Round:
        started = ctx.now()
        planner, tfu, parser = await self._plan_and_execute(problem, ctx, tools, contexts)
        done = Round(planner, tfu.tasks, tfu.spans, parser.problems, started, ctx.now())
        if planner.status == "error":
            done.failure = f"the planner failed: {planner.error}"
            return done  # no plan to join: it is replanned or the run fails
        request = ctx.request(
            messages=prompts.joiner_messages(problem.question, [*earlier_pads, done.pad], final=final),
            temperature=0.0,
            max_tokens=self.config.max_join_tokens,
        )
        done.joiner = await ctx.sample(request, label="joiner", parents=[s.id for s in done.spans.values()])
        balanced = self.config.join_answer == "balanced"
        done.decision = prompts.parse_join(done.joiner.text, balanced=balanced) if done.joiner.is_ok else None
        return done

    async def _plan_and_execute(
        self, problem: Problem, ctx: RunContext, tools: Mapping[str, Tool], contexts: list[str]
    ) -> tuple[Trace, TaskFetchingUnit, PlanParser]:
        messages = prompts.planner_messages(problem.question, tools, prompts.replan_context(contexts))
        request = ctx.request(
            messages=messages,
            temperature=self.config.planner_temperature,
            max_tokens=self.config.max_plan_tokens,
            stop=(END_OF_PLAN,),
        )
        parser = PlanParser(tools, arguments=self.config.arguments)
        send, receive = anyio.create_memory_object_stream[Task](math.inf)
        tfu = TaskFetchingUnit(ctx, tools, tool_timeout_s=self.config.tool_timeout_s)
        async with ctx.concurrently() as children:
            children.start(tfu.run, receive)
            planner = await self._plan(ctx, request, parser, send, tfu)
        return planner, tfu, parser

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
                send.send_nowait(task)

        def monitor(live: LiveSample) -> str | None:
            if self.config.stream_plan:
                dispatch(parser.feed(live.text()))
            # the reference's task fetching unit stops listening at join(): nothing after counts
            return "plan complete" if parser.done and self.config.stream_plan else None

        with send:
            async with ctx.fanout(request, n=1, label="planner", monitor=monitor) as fan:
                tfu.parents = [t.id for t in fan.traces]
                planner = await _only(fan)
            if planner.status == "error":
                tfu.cancel()
            else:
                dispatch(parser.close(planner.text))
        return planner

    def _finish(self, ctx: RunContext, rounds: list[Round], answer: str | None) -> StrategyResult:
        last = rounds[-1]
        text = last.joiner.text if last.joiner is not None else None
        return ctx.finish(answer, text=text, metrics=_metrics(rounds))

    def _fail(self, ctx: RunContext, rounds: list[Round]) -> StrategyResult:
        last = rounds[-1]
        if last.failure is not None:
            why = f"malformed plan: {last.failure}"  # the planner's text was cut: there is no plan
        else:
            joiner = last.joiner
            why = f"the joiner failed: {joiner.error or joiner.status}" if joiner else "the joiner failed"
        result = ctx.finish(None, text=why, metrics=_metrics(rounds))
        return result.model_copy(update={"stop_reason": "error", "error": why})


async def _only(fan: Any) -> Trace:
    async for trace in fan:
        return trace  # type: ignore[no-any-return]
    raise AssertionError("the planner's fan-out ended without a trace")


def _context_of(done: Round) -> str:
    if done.failure is not None:
        return prompts.failed_plan(done.planner.text, done.failure)
    thought = done.decision.thought if done.decision is not None else "the results were not enough"
    return prompts.previous_plan(done.pad, thought)


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
        "plan_errors": float(sum(len(r.problems) + (r.failure is not None) for r in rounds)),
        "tool_time_s": tool_time,
        "dag_critical_path_s": sum(critical_path_s(r.tasks, r.spans) for r in rounds),
        "planner_s": planner_s,
        "joiner_s": joiner_s,
        "execute_s": sum(r.executed - r.started for r in rounds),
    }


__all__ = ["LLMCompiler", "LLMCompilerConfig"]
