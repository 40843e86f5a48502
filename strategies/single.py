"""One sample: the baseline every parallel method is measured against."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from paragen import BaseStrategy, RunContext
from paragen.answers import extract_answer
from paragen.prompts import solve_messages
from paragen.types import Problem, StrategyResult
from strategies._finisher import FINISHER_TEXT, FinisherFields, check_finisher, needs_finisher, run_finisher


class SingleConfig(FinisherFields):
    n: int = Field(default=1, ge=1, le=1, description="always one sample; present so sweeps can pass n=1")
    temperature: float | None = Field(default=None, ge=0, description="override the run's temperature")


class Single(BaseStrategy[SingleConfig]):
    """Sample once and extract the boxed answer."""

    name = "single"
    Config = SingleConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        overrides: dict[str, Any] = (
            {} if self.config.temperature is None else {"temperature": self.config.temperature}
        )
        check_finisher(ctx, self.config)
        messages = solve_messages(problem.question)
        trace = await ctx.sample(ctx.request(messages=messages, **overrides))
        if self.config.finisher and needs_finisher(trace):
            finished = await run_finisher(ctx, messages, trace, self.config.finisher_tokens)
            return ctx.finish(finished.answer, text=trace.text + FINISHER_TEXT + finished.text)
        trace.answer = extract_answer(trace.text) if trace.is_ok else None
        return ctx.finish(trace.answer, text=trace.text, reasoning=trace.reasoning)
