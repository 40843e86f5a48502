"""Beam search: which beams survive each depth, early finish, the depth limit, scoring as samples end."""

from __future__ import annotations

from typing import Any

import pytest
from search_helpers import VERIFIER, Tree, by_text, run_search, score_traces, tree_backend

from paragen.backends.base import Capabilities
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.errors import ConfigError
from paragen.scoring import ScriptedScorer
from strategies.beam_search import BeamSearch

SLOW = 0.05
# N=4, M=2: 4 first steps, 2 beams kept, each proposes 2 next steps.
TREE: Tree = {
    (): ["a1", "a2", "a3", "a4"],
    ("a1",): ["b1", "b2"],
    ("a3",): ["c1", "c2 so \\boxed{5}"],
    ("a3", "c1"): ["d1 \\boxed{5}", "d2 \\boxed{7}"],
    ("a1", "b2"): ["e1 \\boxed{7}", ("e2 \\boxed{7}", SLOW)],
}
SCORES = {"a1": 0.9, "a2": 0.2, "a3": 0.8, "a4": 0.5, "b1": 0.3, "b2": 0.7, "c1": 0.95}
SCORES |= {"c2 so \\boxed{5}": 0.6, "d1 \\boxed{5}": 0.9, "d2 \\boxed{7}": 0.4, "e1 \\boxed{7}": 0.45}


def beam(**options: Any) -> BeamSearch:
    return BeamSearch(n=4, m=2, verifier=VERIFIER, **options)


@pytest.mark.anyio
async def test_exact_path_early_finish_and_weighted_answer() -> None:
    result, _, _ = await run_search(beam(), TREE, SCORES)
    t = by_text(result)
    dropped = [t[s].meta.get("search") for s in ("a2", "a4", "b1")]
    assert dropped == ["dropped at depth 0", "dropped at depth 0", "dropped at depth 1"]
    assert "search" not in t["a1"].meta and "search" not in t["c1"].meta
    # Depth 2 proposes d1, d2 (from c1) and e1, e2 (from b2); with c2 finished at depth 1, three more
    # finishers make N=4, so the slow e2 is cancelled mid-way.
    e2 = next(x for x in result.traces if x.text.startswith("e2"))
    assert e2.status == "cancelled" and e2.cancel_reason == "early-finish: 3 paths ended at depth 2"
    parents = [t[s].parents for s in ("a1", "b2", "c1", "d1 \\boxed{5}")]
    assert parents == [[], [t["a1"].id], [t["a3"].id], [t["c1"].id]]
    # Finished: c2 (.6, 5), d1 (.9, 5), d2 (.4, 7), e1 (.45, 7): 5 weighs 1.5, 7 weighs 0.85.
    assert result.answer == "5" and result.metrics["winner_weight"] == pytest.approx(1.5)
    assert result.text == "a3\n\nc1\n\nd1 \\boxed{5}"
    assert t["d1 \\boxed{5}"].scores == [0.8, 0.95, 0.9]
    assert result.metrics["finished"] == 4 and result.metrics["depth"] == 3


@pytest.mark.anyio
async def test_score_traces_accounting_and_parents() -> None:
    result, backend, scorer = await run_search(beam(), TREE, SCORES)
    t, scores = by_text(result), score_traces(result)
    ok_samples = [x for x in result.traces if x.kind == "sample" and x.is_ok]
    assert len(scores) == len(ok_samples) == scorer.calls == 11  # 4 + 4 + 3: every written step
    assert result.usage.num_scores == 11 and result.usage.score_tokens > 0
    d1_score = next(s for s in scores if s.parents[-1] == t["d1 \\boxed{5}"].id)
    assert d1_score.parents == [t["a3"].id, t["c1"].id, t["d1 \\boxed{5}"].id]
    assert scorer.requests[-1].question == "What is 2 + 3?"
    assert result.usage.num_samples == 12 and result.usage.num_cancelled == 1
    stops = {r.request.params.stop for r in backend.streams}
    assert stops == {("\n\n",)}


@pytest.mark.anyio
async def test_each_proposal_is_scored_as_soon_as_it_ends() -> None:
    tree: Tree = {
        (): ["a1", ("a2 is slow", 0.02)],
        ("a1",): ["x \\boxed{1}"],
        ("a2 is slow",): ["y \\boxed{1}"],
    }
    scorer = ScriptedScorer({"a1": 0.9}, latency=0.03)
    result, _, _ = await run_search(BeamSearch(n=2, m=1, verifier=VERIFIER), tree, scorer)
    t, scores = by_text(result), score_traces(result)
    first = next(s for s in scores if s.parents == [t["a1"].id])
    slow = t["a2 is slow"]
    assert slow.end is not None and first.start < slow.end  # a1's score ran while a2 was being written


@pytest.mark.anyio
async def test_aggregate_decides_which_beams_survive() -> None:
    tree: Tree = {
        (): ["p", "q", "r", "s"],
        ("p",): ["p2", "p3"],
        ("q",): ["q2", "q3"],
        ("p", "p2"): ["\\boxed{1}"],
        ("q", "q2"): ["\\boxed{2}"],
        ("q", "q3"): ["\\boxed{2}"],
    }
    scores = {"p": 0.3, "q": 0.9, "p2": 0.8, "p3": 0.1, "q2": 0.6, "q3": 0.7, "\\boxed{1}": 0.9}
    scores |= {"\\boxed{2}": 0.5}
    last, _, _ = await run_search(beam(), tree, scores)
    low, _, _ = await run_search(beam(aggregate="min"), tree, scores)
    # Depth 1 keeps two: by the last step p2 (.8) and q3 (.7); by the weakest step q3 (.7) and q2 (.6).
    assert last.answer == "1" and last.metrics["winner_weight"] == pytest.approx(1.8)
    assert low.answer == "2" and low.metrics["winner_weight"] == pytest.approx(4 * 0.5)


@pytest.mark.anyio
async def test_depth_limit_writes_the_last_step_to_the_end() -> None:
    tree: Tree = {(): ["a"], ("a",): ["b"], ("a", "b"): ["c\n\nd \\boxed{4}"]}
    result, backend, _ = await run_search(BeamSearch(n=1, m=1, max_depth=3, verifier=VERIFIER), tree, {})
    assert [r.request.params.stop for r in backend.streams] == [("\n\n",), ("\n\n",), ()]
    # The run's max_tokens (256) bounds the solution: each step asks for what is left of it.
    assert [r.request.params.max_tokens for r in backend.streams] == [256, 255, 254]
    assert result.answer == "4" and result.metrics["depth"] == 3


@pytest.mark.anyio
async def test_depth_limit_without_finishing_leaves_no_answer() -> None:
    tree: Tree = {(): ["a"], ("a",): ["b"]}
    strategy = BeamSearch(n=1, m=1, max_depth=2, finish_at_limit=False, verifier=VERIFIER)
    result, backend, _ = await run_search(strategy, tree, {})
    assert len(backend.streams) == 2 and result.answer is None and result.metrics["finished"] == 0


@pytest.mark.anyio
async def test_run_seed_gives_every_request_its_own_seed() -> None:
    _, backend, _ = await run_search(beam(), TREE, SCORES, seed=10)
    seeds = sorted(r.request.params.seed or 0 for r in backend.streams)
    assert seeds == list(range(10, 10 + len(backend.streams)))


@pytest.mark.anyio
async def test_a_backend_that_cannot_continue_is_refused() -> None:
    backend = tree_backend(TREE, Capabilities(logprobs=True))
    with pytest.raises(ConfigError, match="continue a prefilled reply"):
        await run_search(beam(), backend, SCORES)


def test_bad_configs() -> None:
    with pytest.raises(ConfigError, match="multiple of m"):
        BeamSearch(n=6, m=4)
    with pytest.raises(ConfigError, match="unknown scorer"):
        BeamSearch(verifier="nonsense")
    with pytest.raises(ConfigError, match="aggregate"):
        BeamSearch(aggregate="mean")
    assert BeamSearch(n=8, m=2).config.n == 8


@pytest.mark.anyio
async def test_max_tokens_bounds_a_whole_solution_not_one_step() -> None:
    """A run's max_tokens is one solution's length, as in every strategy: each step asks only for what
    the solution has left, and the path that used it up ends (a depth of 40 steps of 512 tokens used
    to be 20k tokens for `--max-tokens 96`)."""
    backend = ScriptedBackend(lambda _request, _index: Script(text="one two three four five"))
    result, backend, _ = await run_search(BeamSearch(n=2, m=1, verifier=VERIFIER), backend, {}, max_tokens=12)
    asked = sorted({r.request.params.max_tokens for r in backend.streams}, reverse=True)
    assert asked == [12, 7, 2]
    last = [t for t in result.traces if t.kind == "sample" and t.completion_tokens == 2]
    assert last and all(t.finish_reason == "length" for t in last)
    assert result.usage.sequential_tokens == 12 and result.metrics["depth"] == 3
