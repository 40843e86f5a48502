"""Parallel-Probe live (scripted): rounds at (r + 2) * interval tokens, every call checked, a
dissenter dropped, a stable majority stopping the run, and runs that end without a stop."""

from __future__ import annotations

import pytest
from strategy_helpers import PROBLEM, SYNC, samples, words

from paragen.backends.base import Capabilities
from paragen.backends.scripted import Script, ScriptedBackend, tokenize
from paragen.config import Budget
from paragen.errors import ConfigError
from paragen.orchestrator import Orchestrator
from paragen.types import GenerateRequest, SamplingParams, StrategyResult, Trace
from strategies.dynasor import PROBE_TEXT
from strategies.parallel_probe import ParallelProbe

# Branch by seed (the run's seed is 0, branch i gets seed i; a probe keeps its branch's seed).
TEXTS = {0: words(40, "5", "a"), 1: words(40, "5", "b"), 2: words(40, "7", "c"), 3: words(10, "9", "d")}
PROBE_SAYS = {0: "5}", 1: "5}", 2: "7}", 3: "9}"}


def _backend(texts: dict[int, str], says: dict[int, str], caps: Capabilities = SYNC) -> ScriptedBackend:
    def respond(request: GenerateRequest, index: int) -> Script:
        branch = request.params.seed or 0
        return Script(text=says[branch] if request.continue_final else texts[branch])

    return ScriptedBackend(respond, capabilities=caps)


async def _run(strategy: ParallelProbe, backend: ScriptedBackend) -> StrategyResult:
    defaults = SamplingParams(max_tokens=64, seed=0)
    return await Orchestrator(backend, defaults=defaults).run(strategy, PROBLEM)


def _by_seed(result: StrategyResult) -> dict[int, Trace]:
    traces = samples(result)
    return {i: trace for i, trace in enumerate(sorted(traces, key=lambda t: t.id))}


def _probe_calls(backend: ScriptedBackend) -> list[tuple[int, int]]:
    """(branch, tokens of the branch's text the probe carries) per probe request, sorted."""
    calls = []
    for stream in backend.streams:
        request = stream.request
        if request.continue_final:
            content = request.messages[-1].content if request.messages else ""
            assert content.endswith(PROBE_TEXT)
            branch = request.params.seed or 0
            prefix = content[: -len(PROBE_TEXT)]
            assert TEXTS[branch].startswith(prefix)
            calls.append((branch, len(tokenize(prefix))))
    return sorted(calls)


@pytest.mark.anyio
async def test_a_dissenter_is_dropped_and_a_stable_majority_stops_every_branch() -> None:
    strategy = ParallelProbe(n=4, interval=4, stable=3, patience=2, warmup=1, probe_tokens=3)
    backend = _backend(TEXTS, PROBE_SAYS)
    result = await _run(strategy, backend)
    # Round r probes at (r + 2) * 4 tokens; d (10 tokens) ends before round 1 and then votes 9;
    # c disagrees in rounds 1 and 2 (round 0 is the warmup) and is dropped at 16 tokens; the
    # majority 5 repeats in rounds 1-3, so round 3 (20 tokens) stops a and b.
    assert _probe_calls(backend) == sorted(
        [(0, 8), (1, 8), (2, 8), (3, 8)]
        + [(b, at) for at in (12, 16) for b in (0, 1, 2)]
        + [(0, 20), (1, 20)]
    )
    probe_requests = [s.request for s in backend.streams if s.request.continue_final]
    assert all(r.params.max_tokens == 3 and r.params.stop == () for r in probe_requests)
    samples_requests = [s.request for s in backend.streams if not s.request.continue_final]
    assert sorted(r.params.seed or 0 for r in samples_requests) == [0, 1, 2, 3]
    assert all(r.n == 1 for r in samples_requests)  # one request per branch, held on its own
    a, b, c, d = (_by_seed(result)[i] for i in range(4))
    assert (a.completion_tokens, a.status, a.cancel_reason) == (20, "cancelled", "majority stable")
    assert (b.completion_tokens, b.status, b.cancel_reason) == (20, "cancelled", "majority stable")
    assert (c.completion_tokens, c.status, c.cancel_reason) == (16, "pruned", "pruned by probe")
    assert (d.completion_tokens, d.status, d.cancel_reason, d.answer) == (10, "ok", None, "9")
    probes = [t for t in result.traces if t.kind == "probe"]
    assert len(probes) == 12 and all(p.status == "ok" and p.completion_tokens == 1 for p in probes)
    assert sorted((p.meta["round"], p.meta["at"]) for p in probes if p.parents == [a.id]) == [
        (0, 8),
        (1, 12),
        (2, 16),
        (3, 20),
    ]
    assert {p.answer for p in probes if p.parents == [c.id]} == {"7"}
    assert result.answer == "5" and result.text is None  # no branch that answered 5 finished
    assert result.metrics["rounds"] == 4 and result.metrics["stop_round"] == 3
    assert result.metrics["dropped"] == 1 and result.metrics["probes"] == 12
    assert result.details == {"stop": "stable", "dropped_at_round": {c.id: 2}}
    usage = result.usage
    assert (usage.total_tokens, usage.probe_tokens, usage.num_probes) == (20 + 20 + 16 + 10, 12, 12)
    assert result.metrics["sequential_tokens"] == usage.sequential_tokens == 20


@pytest.mark.anyio
async def test_without_a_stable_majority_the_run_answers_the_last_rounds_majority() -> None:
    texts = {0: words(14, "5", "a"), 1: words(22, "7", "b")}
    backend = _backend(texts, {0: "5}", 1: "7}"})
    result = await _run(ParallelProbe(n=2, interval=4, stable=50, patience=1, warmup=9), backend)
    # Rounds at 8, 12 (both probed), 16, 20 (b alone: a ended at 14); b's end at 22 completes
    # round 4, where the final answers 5 and 7 tie: the tie goes to the first branch, a.
    a, b = _by_seed(result)[0], _by_seed(result)[1]
    probes = sorted((p.parents[0], p.meta["at"]) for p in result.traces if p.kind == "probe")
    assert probes == sorted([(a.id, 8), (a.id, 12), (b.id, 8), (b.id, 12), (b.id, 16), (b.id, 20)])
    assert [(t.completion_tokens, t.status, t.cancel_reason) for t in (a, b)] == [
        (14, "ok", None),
        (22, "ok", None),
    ]
    assert result.answer == "5" and result.text == texts[0]
    assert result.metrics["rounds"] == 5 and result.metrics["stop_round"] == -1
    assert result.details == {"stop": "all finished", "dropped_at_round": {}}


@pytest.mark.anyio
async def test_the_round_limit_cancels_the_running_branches() -> None:
    backend = _backend(TEXTS, PROBE_SAYS)
    result = await _run(ParallelProbe(n=2, interval=4, stable=9, max_rounds=2), backend)
    assert [(t.completion_tokens, t.cancel_reason) for t in samples(result)] == [(12, "round limit")] * 2
    assert result.answer == "5" and result.details["stop"] == "round limit"


@pytest.mark.anyio
async def test_a_backend_that_cannot_continue_a_reply_is_refused() -> None:
    with pytest.raises(ConfigError, match="continuing its text"):
        await _run(ParallelProbe(n=2), _backend(TEXTS, PROBE_SAYS, caps=Capabilities()))


@pytest.mark.anyio
async def test_a_deadline_while_branches_wait_for_a_slow_one_ends_the_run() -> None:
    def respond(request: GenerateRequest, index: int) -> Script:
        if request.continue_final:
            return Script(text="5}")
        slow = request.params.seed == 1
        return Script(text=TEXTS[0], token_delay=0.05 if slow else 0.0)

    backend = ScriptedBackend(respond, capabilities=SYNC)
    orch = Orchestrator(
        backend, defaults=SamplingParams(max_tokens=64, seed=0), budget=Budget(deadline_s=0.3)
    )
    result = await orch.run(ParallelProbe(n=2, interval=4), PROBLEM)
    fast, slow = (_by_seed(result)[i] for i in range(2))
    assert result.stop_reason == "deadline" and all(s.closed is not None for s in backend.streams)
    assert fast.completion_tokens == 8 and slow.completion_tokens < 8  # held at round 0's mark
    assert fast.status == slow.status == "cancelled"
