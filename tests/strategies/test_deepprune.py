"""DeepPrune: clustering decisions (pure), judges, and a timed pruning run on the scripted backend."""

from __future__ import annotations

import random

import pytest
from strategy_helpers import run, samples

from paragen.backends.scripted import Script
from strategies.deepprune import DeepPrune
from strategies.deepprune.clustering import Clusters, choose_cluster, sample_members, survivors, word_prefix
from strategies.deepprune.judges import load_judge
from strategies.deepprune.judges.lexical import jaccard


def test_word_prefix_counts_plain_or_marker_words() -> None:
    text = "First we add. So 2 plus 3. Then wait, check it. Thus five."
    assert word_prefix(text, 3) == "First we add"
    assert word_prefix(text, 3, ["so", "then", "thus", "wait"]) == "First we add. So 2 plus 3. Then wait"
    assert word_prefix(text, 9, ["so"]) is None


def test_choose_cluster_joins_above_tau_opens_below_and_joins_at_the_cap() -> None:
    assert choose_cluster([[0.9, 0.7], [0.2]], tau=0.5, max_clusters=32) == 0
    assert choose_cluster([[0.4, 0.5], [0.2]], tau=0.5, max_clusters=32) is None  # mean must exceed tau
    assert choose_cluster([[0.4], [0.45]], tau=0.5, max_clusters=2) == 1  # cap reached: most similar
    assert choose_cluster([], tau=0.5, max_clusters=32) is None
    assert choose_cluster([[0.8], [0.8]], tau=0.5, max_clusters=32) == 0  # ties: the older cluster


def test_sample_members_caps_comparisons_at_k1() -> None:
    groups = [[1, 2, 3, 4, 5], [6]]
    picked = sample_members(groups, 3, random.Random(0))
    assert len(picked[0]) == 3 and set(picked[0]) <= {1, 2, 3, 4, 5} and picked[1] == [6]


def test_survivors_are_the_largest_clusters_first_k2_or_k3_random() -> None:
    assert survivors([[1], [2, 3, 4], [5, 6]], k2=2, k3=1, rng=random.Random(0)) == [2, 3]
    singles = survivors([[1], [2], [3], [4]], k2=2, k3=2, rng=random.Random(0))
    assert len(singles) == 2 and set(singles) <= {1, 2, 3, 4}
    clusters = Clusters()
    assert [clusters.add(1, None), clusters.add(2, 0), clusters.add(3, None)] == [0, 0, 1]
    assert clusters.groups == [[1, 2], [3]] and clusters.members == [1, 2, 3]


def test_jaccard() -> None:
    assert jaccard("a b c", "a b c") == 1.0
    assert jaccard("a b c", "x y z") == 0.0
    assert jaccard("a b c d", "a b c e") == pytest.approx(2 / 4)


@pytest.mark.anyio
async def test_lexical_judge_is_a_loadable_plugin() -> None:
    judge = load_judge("lexical", {"n": 1})
    assert await judge.same_answer([("x y", "x y"), ("x", "z")]) == [1.0, 0.0]


SAME = "Add the two numbers carefully here: two plus three gives five so the total"
OTHER = "Multiply instead because product matters: two times three gives six so then"


@pytest.mark.anyio
async def test_deepprune_prunes_all_but_the_largest_clusters_first_k2() -> None:
    scripts = [
        Script(text=f"{SAME} is \\boxed{{5}}", token_delay=0.01),
        Script(text=f"{SAME} is surely \\boxed{{5}}", token_delay=0.01),
        Script(text=f"{OTHER} \\boxed{{6}}" + " more" * 40, token_delay=0.01),
        # Two tokens behind, so it joins the largest cluster after the first two (which keep running):
        # samples reaching their prefix at once join in the order the loop runs them (trio shuffles it).
        Script(text=f"{SAME} is clearly" + " more" * 40 + " \\boxed{5}", token_delay=0.01, first_delay=0.02),
    ]
    strategy = DeepPrune(n=4, judge="lexical", truncation="words", prefix_k=8, tau=0.5, k2=2)
    result, _ = await run(strategy, scripts)
    traces = samples(result)
    assert [t.status for t in traces] == ["ok", "ok", "pruned", "pruned"]
    assert {t.cancel_reason for t in traces if t.status == "pruned"} == {"deepprune: redundant"}
    pruned_at = max(t.end or 0 for t in traces if t.status == "pruned")
    assert pruned_at < min(t.end or 0 for t in traces if t.status == "ok")  # pruned before the keepers end
    assert result.answer == "5"
    assert result.metrics["clusters"] == 2 and result.metrics["largest_cluster"] == 3
    assert result.usage.total_tokens < sum(len(s.text.split()) for s in scripts)
    judge_spans = [t for t in result.traces if t.kind == "tool" and t.label.startswith("judge:lexical")]
    assert len(judge_spans) == 3  # the first trace opens a cluster without any judge call


@pytest.mark.anyio
async def test_deepprune_all_singletons_lets_k3_random_traces_finish() -> None:
    texts = ["alpha beta gamma delta epsilon", "one two three four five", "red green blue cyan pink"]
    scripts = [
        Script(text=f"{t} " + "pad " * 30 + f"\\boxed{{{i}}}", token_delay=0.01) for i, t in enumerate(texts)
    ]
    strategy = DeepPrune(n=3, judge="lexical", truncation="words", prefix_k=5, k3=1)
    result, _ = await run(strategy, scripts)
    assert [t.status for t in samples(result)].count("ok") == 1
    assert result.metrics["pruned"] == 2 and result.answer is not None
