"""Self-consistency (Wang et al., 2022): n samples, the most frequent final answer wins."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from paragen import BaseStrategy, RunContext
from paragen.prompts import solve_messages
from paragen.types import ChatMessage, Problem, StrategyResult, Trace
from strategies._finisher import FinisherFields, check_finisher, needs_finisher, run_finisher
from strategies._toolkit import annotate, vote_finish


class MajorityConfig(FinisherFields):
    n: int = Field(default=8, ge=1, le=1024, description="samples to vote over")
    temperature: float | None = Field(default=None, ge=0, description="override the run's temperature")


class Majority(BaseStrategy[MajorityConfig]):
    """n samples at once; vote over their answers (NO_ANSWER ignored, ties to the first seen)."""

    name = "majority"
    Config = MajorityConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        overrides: dict[str, Any] = (
            {} if self.config.temperature is None else {"temperature": self.config.temperature}
        )
        check_finisher(ctx, self.config)
        messages = solve_messages(problem.question)
        request = ctx.request(messages=messages, **overrides)
        finished: list[Trace] = []
        async with ctx.fanout(request, n=self.config.n) as fan:
            async for trace in fan:
                finished.append(annotate(trace))
        if self.config.finisher:
            await self._finish_cut_off(ctx, messages, finished)
        return vote_finish(ctx, finished)

    async def _finish_cut_off(
        self, ctx: RunContext, messages: list[ChatMessage], traces: list[Trace]
    ) -> None:
        """Every sample the budget cut off gets the finisher (at once); its answer is the sample's vote."""

        async def finish(trace: Trace) -> None:
            trace.answer = (await run_finisher(ctx, messages, trace, self.config.finisher_tokens)).answer

        async with ctx.concurrently() as children:
            for trace in traces:
                if needs_finisher(trace):
                    children.start(finish, trace)
