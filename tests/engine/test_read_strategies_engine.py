"""The strategies that read their samples' signals (parallel_probe's probes, cisc's confidences,
self_certainty's top-k logprobs) and the fork/join executor, end to end on the real engine with
SmolLM2-135M-Instruct: each ends "done", its own calls booked as their kind, its engine cache whole.

The exact decisions are checked on the scripted backend (tests/strategies); here what is checked is
that the real path delivers what each strategy reads: probes that continue a running sample, a
P(True) token's logprob, twenty alternatives per token.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from paragen import Orchestrator, Problem
from paragen.backends.engine import EngineBackend
from paragen.strategy import build_strategy
from paragen.types import SamplingParams, StrategyResult

pytestmark = pytest.mark.anyio

PROBLEM = Problem(id="p", question="What is 3 + 4?", gold="7")
SAMPLING = SamplingParams(max_tokens=48, temperature=0.7, seed=0)


@pytest.fixture
def anyio_backend() -> str:
    return (
        "asyncio"  # one event loop is enough here: the loops' differences are tested on the scripted backend
    )


@pytest.fixture(scope="module")
def smollm2(smol_dir: Path) -> Iterator[EngineBackend]:
    backend = EngineBackend.from_spec(str(smol_dir), dtype="float32")
    yield backend
    anyio.run(backend.aclose)


async def run(backend: EngineBackend, name: str, **options: object) -> StrategyResult:
    free = backend.engine.num_free_blocks
    result = await Orchestrator(backend, defaults=SAMPLING).run(build_strategy(name, options), PROBLEM)
    assert result.stop_reason == "done", result.error
    assert not [t.error for t in result.traces if t.status == "error"]
    assert backend.engine.num_free_blocks == free  # every sequence, probes and cancelled ones too, freed
    return result


async def test_parallel_probe_probes_branches_at_their_rounds_token_count(smollm2: EngineBackend) -> None:
    result = await run(smollm2, "parallel_probe", n=4, interval=8, probe_tokens=8, stable=1, warmup=0)
    probes = [t for t in result.traces if t.kind == "probe"]
    assert probes and result.usage.num_probes == len(probes) == result.metrics["probes"]
    assert result.usage.probe_tokens == sum(t.completion_tokens for t in probes) > 0
    # A round whose branches all finished before its count is decided without a probe.
    assert {p.meta["round"] for p in probes} <= set(range(int(result.metrics["rounds"])))
    assert all(p.meta["at"] >= (p.meta["round"] + 2) * 8 for p in probes)  # probed at its round's count


@pytest.mark.parametrize("confidence", ["p_true", "verbal", "sequence_probability"])
async def test_cisc_reads_each_confidence(smollm2: EngineBackend, confidence: str) -> None:
    result = await run(smollm2, "cisc", n=3, confidence=confidence)
    samples = [t for t in result.traces if t.kind == "sample"]
    scores = [t for t in result.traces if t.kind == "score"]
    assert len(samples) == 3
    extra_calls = 0 if confidence == "sequence_probability" else sum(t.answer is not None for t in samples)
    assert len(scores) == result.usage.num_scores == extra_calls
    assert result.answer is None or any(t.answer == result.answer for t in samples)


@pytest.mark.parametrize("mode", ["borda", "best_of_n"])
async def test_self_certainty_reads_twenty_alternatives_per_token(smollm2: EngineBackend, mode: str) -> None:
    result = await run(smollm2, "self_certainty", n=3, mode=mode)
    samples = [t for t in result.traces if t.kind == "sample"]
    assert all(len(t.top_logprobs or ()) == t.completion_tokens for t in samples)
    assert {len(row) for t in samples for row in t.top_logprobs or ()} == {20}
    assert result.metrics["self_certainty_top_k"] == 20


async def test_forkjoin_without_a_fork_is_one_trunk(smollm2: EngineBackend) -> None:
    """SmolLM2 was not trained on a fork grammar: the trunk runs to its end and no child starts."""
    result = await run(smollm2, "forkjoin")
    assert result.metrics["forks"] == 0 and [t.kind for t in result.traces] == ["sample"]
    assert result.usage.sequential_tokens == result.usage.total_tokens == result.traces[0].completion_tokens


@pytest.mark.parametrize(
    ("name", "options", "readings"),
    [
        ("genselect", {"n": 3}, 1),
        ("tournament", {"n": 3}, 2),  # a game of two, then the winner against the one who waited
        ("heavy", {"reason_k": 3, "summary_k": 2}, 2),
    ],
)
async def test_read_the_samples_strategies_read_their_candidates(
    smollm2: EngineBackend, name: str, options: dict[str, int], readings: int
) -> None:
    """Each samples its candidates, then makes its reading calls, whose parents are the candidates read."""
    result = await run(smollm2, name, **options)
    candidates = [t for t in result.traces if t.label == "candidates"]
    reads = [t for t in result.traces if t.label != "candidates"]
    assert len(candidates) == options.get("n", options.get("reason_k")) and len(reads) == readings
    ids = {c.id for c in candidates}
    assert all(t.kind == "sample" and t.parents and set(t.parents) <= ids for t in reads)
    assert result.usage.total_tokens == sum(t.completion_tokens for t in result.traces)


async def test_verify_refine_books_its_verifications_as_scores(smollm2: EngineBackend) -> None:
    result = await run(
        smollm2, "verify_refine", scaffold="selfcheck", max_iterations=1, verify_tokens=24, verdict_tokens=4
    )
    scores = [t for t in result.traces if t.kind == "score"]
    assert scores and {t.label for t in scores} <= {"verify", "verdict"}
    assert result.usage.score_tokens == sum(t.prompt_tokens + t.completion_tokens for t in scores)
    assert result.details["stop_rule"] in ("accepted", "rejected", "max_iterations")
    assert result.metrics["verifications"] == sum(t.label == "verify" for t in scores)
