"""The task fetching unit: start every action the moment its dependencies are done.

Each action arriving from the planner gets a task in one task group, which waits on
its dependencies' events and then calls its tool; nothing polls. An action whose
dependencies finished long ago starts the instant it arrives, so execution overlaps
the planner still writing the rest of the plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from paragen import RunContext
from paragen.types import Trace
from strategies.llmcompiler.plan import Task, substitute
from strategies.llmcompiler.tools import Tool, ToolInputError


class TaskFetchingUnit:
    """Runs the actions of one plan as a DAG; ``observations`` and ``spans`` fill in as they finish."""

    def __init__(
        self,
        ctx: RunContext,
        tools: Mapping[str, Tool],
        *,
        tool_timeout_s: float = 60.0,
        parents: Sequence[int] = (),
    ) -> None:
        self.ctx = ctx
        self.tools = tools
        self.tool_timeout_s = tool_timeout_s
        self.parents = list(parents)
        self.tasks: dict[int, Task] = {}
        self.spans: dict[int, Trace] = {}
        self._done: dict[int, anyio.Event] = {}
        self._actions = ctx.concurrently()

    def cancel(self) -> None:
        """Stop every action still waiting or running (a malformed plan, or the run ends)."""
        self._actions.cancel("plan abandoned")

    async def run(self, incoming: MemoryObjectReceiveStream[Task]) -> None:
        """Consume actions until the planner closes the stream, and return when all have run."""
        async with self._actions as actions, incoming:
            async for task in incoming:
                self.tasks[task.idx] = task
                self._done[task.idx] = anyio.Event()
                actions.start(self._run_task, task)

    async def _run_task(self, task: Task) -> None:
        if task.refused is not None:  # not run, so no tool call: its observation says why
            task.error, task.observation = task.refused, f"Error: {task.refused}"
        else:
            for dep in task.deps:
                await self._done[dep].wait()
            if not task.is_join:
                await self._call(task)
        self._done[task.idx].set()

    async def _call(self, task: Task) -> None:
        observations = {d: self.tasks[d].observation or "" for d in task.deps}
        args = substitute(task.args, observations)
        kwargs = {k: substitute(v, observations) for k, v in task.kwargs.items()}
        parents = [*self.parents, *(self.spans[d].id for d in task.deps if d in self.spans)]
        async with self.ctx.tool_span(
            f"tool:{task.name}", idx=task.idx, args=list(args), kwargs=kwargs
        ) as span:
            span.parents = parents
            self.spans[task.idx] = span
            task.observation = await self._observe(task, args, kwargs, span)
            span.text = task.observation

    async def _observe(
        self, task: Task, args: tuple[object, ...], kwargs: dict[str, object], span: Trace
    ) -> str:
        """The tool's output, or the error as text: a failed action informs the joiner, not ends the run."""
        tool = self.tools[task.name]
        try:
            with anyio.fail_after(self.tool_timeout_s):
                return await tool(args, kwargs)
        except ToolInputError as exc:
            return self._failed(task, span, str(exc))
        except TimeoutError:
            return self._failed(task, span, f"{task.name} timed out after {self.tool_timeout_s:g}s")
        except Exception as exc:  # a plugin tool's bug must not take the run down
            return self._failed(task, span, f"{task.name} failed: {type(exc).__name__}: {exc}")

    @staticmethod
    def _failed(task: Task, span: Trace, message: str) -> str:
        task.error = message
        span.status, span.error = "error", message
        return f"Error: {message}"


def critical_path_s(tasks: Mapping[int, Task], spans: Mapping[int, Trace]) -> float:
    """The longest chain of tool durations along the plan's dependency edges (seconds)."""
    longest: dict[int, float] = {}
    for idx in sorted(tasks):
        span = spans.get(idx)
        own = (span.end - span.start) if span is not None and span.end is not None else 0.0
        longest[idx] = own + max((longest.get(d, 0.0) for d in tasks[idx].deps), default=0.0)
    return max(longest.values(), default=0.0)


__all__ = ["TaskFetchingUnit", "critical_path_s"]
