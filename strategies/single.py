"""One sample: the baseline every parallel method is measured against."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from paragen import BaseStrategy, RunContext, StrategyConfig
from paragen.answers import extract_answer
from paragen.prompts import solve_messages
from paragen.types import Problem, StrategyResult


class SingleConfig(StrategyConfig):
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
        trace = await ctx.sample(ctx.request(messages=solve_messages(problem.question), **overrides))
        trace.answer = extract_answer(trace.text) if trace.is_ok else None
        return ctx.finish(trace.answer, text=trace.text)
