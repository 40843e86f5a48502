"""The Prometheus counters of Python runs (``Orchestrator(metrics=Metrics())``): every outcome, tokens by
kind equal to the runs' own accounting, nothing left in flight; read as plain numbers and as text."""

from __future__ import annotations

from collections import Counter

import anyio
import pytest
from prometheus_client.parser import text_string_to_metric_families

from paragen import Orchestrator, Problem, RunContext, StrategyResult
from paragen._accounting import summarize
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.config import Budget
from paragen.metrics import Metrics, trace_tokens
from paragen.strategy import BaseStrategy, StrategyConfig
from paragen.types import Trace
from strategies.ffs import FFS
from strategies.majority import Majority

pytestmark = pytest.mark.anyio
PROBLEM = Problem(id="p", question="What is 2 + 2?")


class Broken(BaseStrategy[StrategyConfig]):
    name = "broken"

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        await ctx.sample(ctx.request(prompt="x"))
        raise RuntimeError("a bug")


def scripts(*lengths: int, delay: float = 0.002) -> ScriptedBackend:
    return ScriptedBackend(
        [Script(text=" ".join(["w"] * k) + " \\boxed{4}", token_delay=delay) for k in lengths]
    )


async def test_every_outcome_is_counted_and_tokens_equal_the_accounting() -> None:
    metrics = Metrics()
    results = [await Orchestrator(scripts(3, 20, 30), metrics=metrics).run(FFS(n=3), PROBLEM)]
    slow = Orchestrator(scripts(200, 200, delay=0.01), metrics=metrics, budget=Budget(deadline_s=0.2))
    results.append(await slow.run(Majority(n=2), PROBLEM))
    results.append(
        await Orchestrator(scripts(50), metrics=metrics, budget=Budget(max_total_tokens=10)).run(
            Majority(n=2), PROBLEM
        )
    )
    with anyio.move_on_after(0.1):  # cancelled from outside, mid-run
        await Orchestrator(scripts(500, delay=0.01), metrics=metrics).run(Majority(n=2), PROBLEM)
    with pytest.raises(RuntimeError, match="a bug"):
        await Orchestrator(scripts(3), metrics=metrics).run(Broken(), PROBLEM)

    values = metrics.values()
    outcomes = {k: v for k, v in values.items() if k.startswith("paragen_runs_total")}
    assert outcomes == {
        'paragen_runs_total{outcome="done",strategy="ffs"}': 1,
        'paragen_runs_total{outcome="deadline",strategy="majority"}': 1,
        'paragen_runs_total{outcome="budget",strategy="majority"}': 1,
        'paragen_runs_total{outcome="cancelled",strategy="majority"}': 1,
        'paragen_runs_total{outcome="failed",strategy="broken"}': 1,
    }
    assert [r.stop_reason for r in results] == ["done", "deadline", "budget"]
    assert values["paragen_runs_running"] == values["paragen_samples_running"] == 0
    reasons = Counter(
        t.cancel_reason for r in results for t in r.traces if t.status in ("cancelled", "pruned")
    )
    reasons["abandoned"] += 2  # the two samples of the run cancelled from outside
    assert reasons["first-finish"] == 2 and reasons["budget"] > 0
    prefix = "paragen_samples_cancelled_total"
    assert {k: v for k, v in values.items() if k.startswith(prefix)} == {
        f'{prefix}{{reason="{reason}"}}': float(count) for reason, count in reasons.items()
    }
    finished = sum(r.usage.total_tokens for r in results)
    assert values['paragen_tokens_total{kind="wasted"}'] >= sum(r.usage.wasted_tokens for r in results)
    assert (
        values['paragen_tokens_total{kind="generated"}'] > finished
    )  # plus the cancelled and the broken run's
    assert (
        values['paragen_run_latency_seconds_count{strategy="majority"}'] == 2
    )  # runs that ended with a result

    text = metrics.exposition().decode()
    parsed = {
        s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels
    }
    assert parsed["paragen_runs_running"] == 0 and "paragen_hedges_total" in parsed


def test_trace_tokens_sum_to_summarize_for_every_kind_and_status() -> None:
    traces = [
        Trace(id=0, kind="sample", status="ok", completion_tokens=7, prompt_tokens=3, cached_prompt_tokens=2),
        Trace(id=1, kind="sample", status="cancelled", completion_tokens=5, prompt_tokens=3, hedged_tokens=4),
        Trace(id=2, kind="sample", status="pruned", completion_tokens=2, prompt_tokens=3),
        Trace(id=3, kind="judge", completion_tokens=1, prompt_tokens=9),
        Trace(id=4, kind="probe", completion_tokens=6, prompt_tokens=4),
        Trace(id=5, kind="score", completion_tokens=2, prompt_tokens=8),
        Trace(id=6, kind="tool"),
    ]
    sums: dict[str, int] = {}
    for trace in traces:
        for kind, count in trace_tokens(trace):
            sums[kind] = sums.get(kind, 0) + count
    usage = summarize(traces, latency_s=1.0)
    assert sums == {
        "prompt": usage.prompt_tokens,
        "cached": usage.cached_prompt_tokens,
        "generated": usage.total_tokens,
        "hedged": usage.hedged_tokens,
        "wasted": usage.wasted_tokens,
        "judge": usage.judge_tokens,
        "probe": usage.probe_tokens,
        "score": usage.score_tokens,
    }
