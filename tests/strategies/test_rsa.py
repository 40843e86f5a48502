"""RSA: seeded subsets, aggregation prompts, the final vote and the step accounting (scripted backend)."""

from __future__ import annotations

import itertools
import re

import pytest
from strategy_helpers import PROBLEM, SYNC, samples, words

from paragen.backends.scripted import Script, ScriptedBackend
from paragen.errors import ConfigError
from paragen.orchestrator import Orchestrator
from paragen.types import GenerateRequest, SamplingParams, Trace
from strategies.rsa import RSA, aggregate_prompt, draw_subsets, subset_rng

FIRST = ["4", "5", "5", "6"]  # the first population's answers, by choice index


def _responder(request: GenerateRequest, index: int) -> Script:
    content = request.messages[-1].content if request.messages else ""
    if "candidate solutions" not in content:
        return Script(text=words(3 + index, FIRST[index]))
    first = re.findall(r"\\boxed\{(\d+)\}", content.split("Candidate 2:")[0])[-1]
    # Adopts candidate 1's answer; its words name its seed, which says which aggregation it is.
    return Script(text=words(2 + int(first), first, stem=f"seed{request.params.seed}/"))


def aggregation(trace: Trace) -> int:
    """Which aggregation of its step a trace is (its seed: the run's, plus step * n + i)."""
    match = re.match(r"seed(\d+)/", trace.text)
    assert match is not None
    return int(match[1])


def test_subsets_are_reproducible_per_seed_and_problem() -> None:
    rng = subset_rng(7, "p")
    assert draw_subsets(rng, 4, 2) == [[1, 3], [0, 2], [1, 3], [1, 2]]
    assert draw_subsets(rng, 4, 2) == [[0, 3], [2, 3], [1, 2], [1, 3]]
    assert draw_subsets(subset_rng(7, "p"), 4, 2) == [[1, 3], [0, 2], [1, 3], [1, 2]]
    assert draw_subsets(subset_rng(8, "p"), 4, 2) != [[1, 3], [0, 2], [1, 3], [1, 2]]
    assert all(len(set(s)) == 3 for s in draw_subsets(subset_rng(1, "q"), 5, 3))


def test_config_and_prompt() -> None:
    with pytest.raises(ConfigError):
        RSA(n=2, k=3)
    prompt = aggregate_prompt("{question}|{k}|{candidates}", "Q?", ["a \\boxed{1}", " b "])
    assert prompt == "Q?|2|Candidate 1:\na \\boxed{1}\n\nCandidate 2:\nb"


@pytest.mark.anyio
async def test_rsa_steps_subsets_vote_and_accounting_are_exact() -> None:
    backend = ScriptedBackend(_responder, capabilities=SYNC)
    orch = Orchestrator(backend, defaults=SamplingParams(max_tokens=64, seed=7))
    result = await orch.run(RSA(n=4, k=2, t=2), PROBLEM)
    traces = samples(result)
    # Each step's aggregations sample at once, so their traces are filed in the order the event loop
    # starts them (trio shuffles it): they are put back in the order the strategy drew them.
    steps = [[t for t in traces if t.label == f"step{s}"] for s in range(3)]
    steps[1:] = [sorted(step, key=aggregation) for step in steps[1:]]
    assert [len(s) for s in steps] == [4, 4, 4]
    assert [t.answer for t in steps[0]] == FIRST
    assert [t.meta["subset"] for t in steps[1]] == [[1, 3], [0, 2], [1, 3], [1, 2]]
    assert [t.meta["subset"] for t in steps[2]] == [[0, 3], [2, 3], [1, 2], [1, 3]]
    assert [t.answer for t in steps[1]] == ["5", "4", "5", "5"]
    assert [t.answer for t in steps[2]] == ["5", "5", "4", "4"]
    for prev, cur in itertools.pairwise(steps):
        for trace in cur:
            assert trace.parents == [prev[j].id for j in trace.meta["subset"]]
    assert result.answer == "5"  # 2-2 tie: the first answer seen wins
    assert [t.completion_tokens for t in steps[0]] == [3, 4, 5, 6]
    assert result.usage.total_tokens == 18 + 27 + 26
    longest = [max(t.completion_tokens for t in s) for s in steps]
    assert longest == [6, 7, 7] and result.usage.sequential_tokens == sum(longest)
    seeds = [s.request.params.seed or 0 for s in backend.streams[1:]]
    assert sorted(seeds) == list(range(7 + 4, 7 + 12))  # every aggregation its own seed
    agg = [s.request.messages[-1].content for s in backend.streams[1:5]]  # type: ignore[index]
    assert any(steps[0][1].text in a and steps[0][3].text in a for a in agg)


@pytest.mark.anyio
async def test_rsa_with_no_steps_is_a_vote_over_the_first_population() -> None:
    backend = ScriptedBackend(_responder, capabilities=SYNC)
    result = await Orchestrator(backend).run(RSA(n=4, k=2, t=0), PROBLEM)
    assert result.answer == "5" and len(samples(result)) == 4 and len(backend.streams) == 1
