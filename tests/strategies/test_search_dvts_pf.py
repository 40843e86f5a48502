"""DVTS (independent greedy subtrees) and particle filtering (seeded resampling) on scripted trees."""

from __future__ import annotations

import math
import random

import pytest
from search_helpers import VERIFIER, Tree, by_text, run_search, score_traces, tree_backend

from paragen.errors import ConfigError
from strategies.dvts import DVTS
from strategies.particle_filtering import ParticleFiltering, log_weight, resampling_probabilities

SLOW = 0.04
# Two subtrees of M=2: tree 0 starts at x1/x2, tree 1 at y1/y2 (each fan-out's choices in order).
DVTS_TREE: Tree = {
    (): ["r1", "r2"],
    ("r1",): ["s1", "s2 \\boxed{3}"],
    ("r2",): ["t1 \\boxed{4}", "t2 \\boxed{3}"],
    ("r1", "s1"): ["u1 \\boxed{4}", ("u2 takes a while \\boxed{4}", SLOW)],
}


@pytest.mark.anyio
async def test_dvts_grows_each_subtree_greedily_and_votes_over_last_proposals() -> None:
    # Both subtrees get r1 (.6) and r2 (.5) first; subtree 0's depth-0 fan-out is the first opened.
    scores = {"r1": 0.6, "r2": 0.5, "s1": 0.9, "s2 \\boxed{3}": 0.2, "t1 \\boxed{4}": 0.3}
    scores |= {"t2 \\boxed{3}": 0.7, "u1 \\boxed{4}": 0.8, "u2 takes a while \\boxed{4}": 0.1}
    result, _, scorer = await run_search(DVTS(n=4, m=2, verifier=VERIFIER), DVTS_TREE, scores)
    samples = [t for t in result.traces if t.kind == "sample"]
    labels = sorted({t.label for t in samples})
    assert labels == [
        "tree0/depth0",
        "tree0/depth1",
        "tree0/depth2",
        "tree1/depth0",
        "tree1/depth1",
        "tree1/depth2",
    ]
    # Each subtree keeps r1 (.6 > .5), then s1 (.9 > .2), then u1 (.8, finished): leaves u1, u2 twice.
    assert result.answer == "4" and result.metrics["candidates"] == 4
    assert result.metrics["winner_weight"] == pytest.approx(2 * (0.8 + 0.1))
    assert len(score_traces(result)) == scorer.calls == 12
    dropped = [t for t in samples if t.meta.get("search")]
    assert sorted(t.text for t in dropped) == [
        "r2",
        "r2",
        "s2 \\boxed{3}",
        "s2 \\boxed{3}",
        "u2 takes a while \\boxed{4}",
        "u2 takes a while \\boxed{4}",
    ]


@pytest.mark.anyio
async def test_dvts_subtrees_run_at_once() -> None:
    tree: Tree = {(): [("a takes four tokens", 0.01)], ("a takes four tokens",): ["done \\boxed{1}"]}
    result, _, _ = await run_search(DVTS(n=2, m=1, verifier=VERIFIER), tree, {})
    firsts = [t for t in result.traces if t.kind == "sample" and t.label.endswith("depth0")]
    assert len(firsts) == 2 and result.answer == "1"
    assert max(t.start for t in firsts) < min(t.end or 0 for t in firsts)  # neither waited for the other


@pytest.mark.anyio
def test_resampling_probabilities_are_a_tempered_softmax_of_logits() -> None:
    weights = [log_weight(p, "logit") for p in (0.5, 0.8)]
    assert weights == pytest.approx([0.0, math.log(4)])
    assert resampling_probabilities(weights, 1.0) == pytest.approx([0.2, 0.8])
    assert resampling_probabilities(weights, 2.0) == pytest.approx([1 / 3, 2 / 3])
    assert log_weight(1.0, "logit") == pytest.approx(math.log((1 - 1e-7) / 1e-7))
    assert log_weight(3.5, "raw") == 3.5


PF_TREE: Tree = {
    (): ["g", "h", "k"],
    ("g",): ["g done \\boxed{6}"],
    ("h",): ["h done \\boxed{5}"],
    ("k",): ["k done \\boxed{5}"],
}
PF_SCORES = {"g": 0.8, "h": 0.5, "k": 0.2, "g done \\boxed{6}": 0.9, "h done \\boxed{5}": 0.6}
PF_SCORES |= {"k done \\boxed{5}": 0.6}


@pytest.mark.anyio
async def test_particles_resample_with_the_seeded_generator() -> None:
    strategy = ParticleFiltering(n=3, verifier=VERIFIER)
    result, _, _ = await run_search(strategy, tree_backend(PF_TREE, seed=11), PF_SCORES, seed=11)
    t = by_text(result)
    probs = resampling_probabilities([log_weight(p, "logit") for p in (0.8, 0.5, 0.2)], 1.0)
    drawn = random.Random("particle_filtering/11/p").choices(range(3), weights=probs, k=3)
    firsts = [t["g"], t["h"], t["k"]]
    expected = sorted(firsts[i].text for i in drawn)
    seconds = [x for x in result.traces if x.kind == "sample" and x.label == "depth1"]
    assert sorted(x.text.split()[0] for x in seconds) == expected
    assert all(x.parents == [next(f.id for f in firsts if f.text == x.text[0])] for x in seconds)
    again, _, _ = await run_search(strategy, tree_backend(PF_TREE, seed=11), PF_SCORES, seed=11)
    # The same samples (trace ids follow the order the particles' fan-outs opened in: any, on trio).
    assert sorted((x.label, x.text) for x in again.traces if x.kind == "sample") == sorted(
        (x.label, x.text) for x in result.traces if x.kind == "sample"
    )


@pytest.mark.anyio
async def test_finished_particles_are_carried_and_argmax_or_vote_decides() -> None:
    tree: Tree = {(): ["a \\boxed{6}", "b", "c"], ("b",): ["b2 \\boxed{5}"], ("c",): ["c2 \\boxed{5}"]}
    scores = {"a \\boxed{6}": 0.9, "b": 0.9, "c": 0.9, "b2 \\boxed{5}": 0.6, "c2 \\boxed{5}": 0.6}
    # Equal weights after depth 0: three uniform draws from [a (finished), b, c].
    drawn = random.Random("particle_filtering/3/p").choices(range(3), weights=[1 / 3] * 3, k=3)
    copies_of_a = drawn.count(0)
    argmax, backend, _ = await run_search(
        ParticleFiltering(n=3, verifier=VERIFIER), tree_backend(tree, seed=3), scores, seed=3
    )
    grown = [r.request for r in backend.streams[3:]]
    assert len(grown) == 3 - copies_of_a  # a finished: its copies are carried, never extended
    assert argmax.answer == ("6" if copies_of_a else "5") and argmax.metrics["finished"] == 3
    assert argmax.metrics["depth"] == (1 if copies_of_a == 3 else 2)  # the depths that ran, no more
    select_vote = ParticleFiltering(n=3, verifier=VERIFIER, select="vote")
    vote, _, _ = await run_search(select_vote, tree_backend(tree, seed=3), scores, seed=3)
    assert vote.answer == ("6" if 0.9 * copies_of_a > 0.6 * (3 - copies_of_a) else "5")


@pytest.mark.anyio
async def test_particle_depth_limit() -> None:
    tree: Tree = {(): ["a"], ("a",): ["b"], ("a", "b"): ["c"]}
    strategy = ParticleFiltering(n=2, max_depth=2, finish_at_limit=False, verifier=VERIFIER)
    result, backend, _ = await run_search(strategy, tree, {})
    assert len(backend.streams) == 4 and result.answer is None and result.metrics["finished"] == 0
    assert result.metrics["depth"] == 2


def test_bad_configs_and_n() -> None:
    with pytest.raises(ConfigError, match="multiple of m"):
        DVTS(n=10, m=4)
    with pytest.raises(ConfigError, match="resample_temperature"):
        ParticleFiltering(resample_temperature=0)
    with pytest.raises(ConfigError, match="select"):
        ParticleFiltering(select="best")
