"""The LLM-as-verifier on SmolLM2 through paragen's engine: a real verdict token, a real cost."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from paragen import Orchestrator, Problem, RunContext, StrategyResult
from paragen.backends.engine import EngineBackend
from paragen.strategy import BaseStrategy, StrategyConfig

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

QUESTION = "Tom has 3 apples and buys 4 more. How many apples does he have?"
STEPS = ("Tom starts with 3 apples.", "He buys 4 more, so 3 + 4 = 7.", "The answer is \\boxed{7}.")


class RateSteps(BaseStrategy[StrategyConfig]):
    """Rates the fixed steps one prefix at a time, then the whole solution, with the LLM-as-verifier."""

    name = "rate_steps"

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        scores = [(await ctx.score(STEPS[: i + 1])).last for i in range(len(STEPS))]
        scores.append((await ctx.score(STEPS, whole=True)).last)
        return ctx.finish(None, metrics={f"s{i}": s for i, s in enumerate(scores)})


@pytest.fixture
async def smol(smol_dir: Path) -> AsyncIterator[EngineBackend]:
    backend = EngineBackend.from_spec(str(smol_dir))
    yield backend
    await backend.aclose()


async def test_smollm2_rates_steps_with_its_own_yes_probability(smol: EngineBackend) -> None:
    async with Orchestrator(smol) as orch:
        result = await orch.run(RateSteps(), Problem(question=QUESTION))
    scores = list(result.metrics.values())
    assert len(scores) == 4 and all(0.0 <= s <= 1.0 for s in scores)
    # A verdict word was decoded (no "no opinion" 0.5): the prompt gets a Yes or a No out of a 135M model.
    assert all(abs(s - 0.5) > 1e-9 for s in scores), scores
    traces = result.traces
    assert [t.kind for t in traces] == ["score"] * 4
    assert all(t.completion_tokens == 1 and t.prompt_tokens > 50 and t.status == "ok" for t in traces)
    assert result.usage.score_tokens == sum(t.prompt_tokens + 1 for t in traces)
    assert result.usage.total_tokens == 0 and result.usage.num_scores == 4
