"""Named extra backends: a strategy samples from a second model by name; its traces are the run's."""

from __future__ import annotations

from typing import Any

import pytest

from paragen import BaseStrategy, RunContext, StrategyConfig
from paragen.backends.scripted import ScriptedBackend
from paragen.errors import ConfigError
from paragen.orchestrator import Orchestrator
from paragen.types import Problem, StrategyResult


class _Both(BaseStrategy[StrategyConfig]):
    """One sample on the run's backend, two on "other" (a fan-out), and one from a child strategy."""

    name = "both"

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        own = await ctx.sample(ctx.request(prompt="own"), label="own")
        async with ctx.fanout(
            ctx.request(prompt="x"), n=2, label="other", parents=[own.id], backend="other"
        ) as fan:
            async for _ in fan:
                pass
        child = await ctx.run_strategy(_Child(), label="child")
        # What the strategy itself sees: the other model's traces among its own, and in a child's result.
        seen = {"seen": float(len(ctx.traces)), "child_samples": float(child.usage.num_samples)}
        return ctx.finish(own.text, metrics=seen)


class _Child(BaseStrategy[StrategyConfig]):
    name = "child"

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        await ctx.sample(ctx.request(prompt="y"), backend="other")
        return ctx.finish(None)


class _Opened(ScriptedBackend):
    opened = 0

    async def open(self) -> None:
        self.opened += 1


@pytest.mark.anyio
async def test_samples_on_a_named_backend_are_filed_and_counted_with_the_run() -> None:
    main, other = ScriptedBackend(["a b"]), _Opened(lambda request, index: "one two three")
    result = await Orchestrator(main, backends={"other": other}).run(_Both(), Problem(question="q"))
    assert len(main.streams) == 1 and len(other.streams) == 2 + 1 and other.opened == 1  # fan-out, child
    labels = sorted(t.label for t in result.traces)
    assert labels == ["child/sample", "other", "other", "own"]
    assert result.usage.total_tokens == 2 + 3 * 3 and result.usage.num_samples == 4
    assert [t.parents for t in result.traces if t.label == "other"] == [[0], [0]]
    assert result.metrics == {"seen": 4.0, "child_samples": 1.0}


@pytest.mark.anyio
async def test_an_unknown_name_is_a_config_error() -> None:
    ctx = RunContext(ScriptedBackend(["a"]), Problem(question="q"))
    with pytest.raises(ConfigError, match="no backend named 'judge'"):
        await ctx.sample(ctx.request(prompt="p"), backend="judge")
    with pytest.raises(ConfigError):
        ctx.backend_capabilities("judge")
    assert ctx.backend_capabilities(None) == ctx.capabilities


class _ReaderConfig(StrategyConfig):
    reader: str | None = "judge"


class _Reads(_Child):
    Config = _ReaderConfig

    def __init__(self, **values: Any) -> None:
        super().__init__(**values)


@pytest.mark.anyio
async def test_a_reader_not_given_is_refused_before_any_sample() -> None:
    main = ScriptedBackend(["a"])
    with pytest.raises(ConfigError, match="reads with backend 'judge'"):
        await Orchestrator(main).run(_Reads(), Problem(question="q"))
    assert main.streams == []
