"""Parallel-Probe live on the scripted backend against the authors' simulator (restated): each
branch scripted from one row of a random probe matrix, the run must stop at the simulator's step,
drop the same branches at the same steps and give the same answer."""

from __future__ import annotations

import pytest
from strategy_helpers import PROBLEM, SYNC, samples
from test_parallel_probe_rules import Trajectory, random_case, referenced

from paragen.backends.scripted import Script, ScriptedBackend, tokenize
from paragen.orchestrator import Orchestrator
from paragen.types import GenerateRequest, SamplingParams
from strategies._parallel_probe_rules import ProbeParams
from strategies.dynasor import PROBE_TEXT
from strategies.parallel_probe import ParallelProbe

INTERVAL = 2


def branch_text(trajectory: Trajectory) -> str:
    """A branch with L probe answers is probed at 2..L intervals (column j at (j + 1) intervals),
    so it ends one token past L intervals, its last word boxing its final answer (if any)."""
    probes, final = trajectory
    length = len(probes) * INTERVAL + 1
    return " ".join(["x"] * (length - 1) + ["x" if final is None else f"\\boxed{{{final}}}"])


def scripted(trajectories: list[Trajectory]) -> ScriptedBackend:
    def respond(request: GenerateRequest, index: int) -> Script:
        probes, _ = trajectories[request.params.seed or 0]
        if not request.continue_final:
            return Script(text=branch_text(trajectories[request.params.seed or 0]))
        content = request.messages[-1].content if request.messages else ""
        column = len(tokenize(content[: -len(PROBE_TEXT)])) // INTERVAL - 1
        answer = probes[column]
        return Script(text="none" if answer is None else f"{answer}}}")

    return ScriptedBackend(respond, capabilities=SYNC)


def strategy(n: int, params: ProbeParams) -> ParallelProbe:
    return ParallelProbe(
        n=n,
        interval=INTERVAL,
        stable=params.stable,
        patience=params.patience,
        warmup=params.warmup,
        max_rounds=params.max_rounds,
    )


@pytest.mark.anyio
@pytest.mark.parametrize("seed", range(40))
async def test_a_live_run_decides_as_the_authors_simulator(seed: int) -> None:
    trajectories, params = random_case(seed)
    expected = referenced(trajectories, params)
    orch = Orchestrator(scripted(trajectories), defaults=SamplingParams(max_tokens=512, seed=0))
    result = await orch.run(strategy(len(trajectories), params), PROBLEM)
    ids = [t.id for t in sorted(samples(result), key=lambda t: t.id)]
    assert result.answer == expected.answer
    assert result.details["dropped_at_round"] == {ids[b]: step for b, step in expected.dropped_at.items()}
    assert result.metrics["rounds"] == expected.last_round + 1
    how = {"stable": "stable", "finished": "all finished", "max_steps": "round limit"}[expected.how]
    assert result.details["stop"] == how
