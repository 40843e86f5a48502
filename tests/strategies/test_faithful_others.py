"""FFS-k, DeepPrune, RSA and beam search against their references (art_of_tts's evaluation,
the DeepPrune paper, HyperPotatoNeo/RSA, search-and-learn), and the fan-out's last delta."""

from __future__ import annotations

import random

import pytest
import reference_rules as ref
from reference_rules import beam_duplicates, ffs_k
from search_helpers import VERIFIER, Tree, by_text, run_search
from strategy_helpers import PROBLEM, SYNC, run, samples, words

from paragen import BaseStrategy, RunContext, StrategyConfig
from paragen._live import LiveSample
from paragen.backends.base import Capabilities
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.errors import ConfigError
from paragen.orchestrator import Orchestrator
from paragen.scoring import weighted_answer
from paragen.types import Problem, SamplingParams, StrategyResult
from strategies._search_common import Path
from strategies.beam_search import BeamSearch, beam_order, proposal_counts, survivors
from strategies.deepprune import DeepPrune
from strategies.ffs import FFS, offline_ffs_k
from strategies.rsa import RSA, cluster_winner


def test_offline_ffs_k_cuts_off_as_the_reference_evaluation_on_random_samples() -> None:
    rng = random.Random(5)
    for _ in range(500):
        n, k = rng.randint(1, 8), rng.randint(1, 8)
        data = [(rng.randint(1, 30), rng.choice(["1", "2", "NO_ANSWER"])) for _ in range(n)]
        answers = [None if pred == "NO_ANSWER" else pred for _, pred in data]
        voters, cutoff = offline_ffs_k([length for length, _ in data], answers, k)
        assert (cutoff, sorted(voters)) == ffs_k(data, k)


def test_fewer_than_k_answers_wait_for_the_longest_sample() -> None:
    assert offline_ffs_k([5, 30, 9], ["1", None, None], 2) == ([0], 30)


def test_deepprune_runs_its_own_judge_or_says_which_stands_in() -> None:
    with pytest.raises(ConfigError, match="trained DeepPrune judge"):
        DeepPrune()
    assert DeepPrune(judge_options={"path": "/models/DeepPrune-Judge-4B"}).config.judge == "model"
    assert DeepPrune(judge="embedding").config.judge == "embedding"  # named where it is shown


@pytest.mark.anyio
async def test_rsa_loops_counts_the_first_population_as_the_reference() -> None:
    assert RSA(loops=10).config.t == 9 and RSA(loops=1).config.t == 0
    with pytest.raises(ConfigError, match="loops = t"):
        RSA(loops=3, t=3)
    result, backend = await run(RSA(n=2, k=2, loops=3), [Script(text=words(3, "4"))], caps=SYNC)
    assert result.metrics["steps"] == 3 and len(backend.streams) == 1 + 2 * 2  # one fan-out, then 2 x 2


def test_beam_refill_duplicates_the_kept_beams_in_turn() -> None:
    for kept, n, m in ((1, 8, 2), (3, 8, 4), (2, 8, 4), (4, 16, 4), (5, 16, 2)):
        counts = proposal_counts(kept, n, m, refill=True)
        assert counts == [beam_duplicates(range(kept), n).count(i) for i in range(kept)]
    assert proposal_counts(1, 8, 2, refill=False) == [2]


# N=4, M=2: three of the four first steps end their solutions, so only a1 is left to grow.
TREE: Tree = {
    (): ["a1", "a2 \\boxed{1}", "a3 \\boxed{1}", "a4 \\boxed{2}"],
    ("a1",): ["b1 \\boxed{1}", "b2 \\boxed{1}", "b3 \\boxed{2}", "b4 \\boxed{2}"],
}


@pytest.mark.anyio
@pytest.mark.parametrize(("refill", "breadth"), [(True, 4), (False, 2)])
async def test_beam_search_keeps_the_breadth_at_n(refill: bool, breadth: int) -> None:
    strategy = BeamSearch(n=4, m=2, verifier=VERIFIER, max_depth=2, refill=refill)
    result, _, _ = await run_search(strategy, TREE, {"a1": 0.9})
    a1 = by_text(result)["a1"]
    grown = [t for t in result.traces if t.kind == "sample" and t.parents == [a1.id]]
    assert len(grown) == breadth


class _Watcher(BaseStrategy[StrategyConfig]):
    """Two choices of one shared stream, every delta handed to a monitor that notes what it saw."""

    name = "watcher_test"
    seen: list[tuple[int, bool]]

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        self.seen = []

        def watch(live: LiveSample) -> None:
            self.seen.append((live.num_tokens, live.finished))

        async with ctx.fanout(ctx.request(prompt="q", n=2), monitor=watch) as fan:
            got = [t async for t in fan]
        return ctx.finish(str(len(got)))


@pytest.mark.anyio
async def test_a_monitor_sees_the_last_delta_of_a_shared_stream() -> None:
    watcher = _Watcher()
    backend = ScriptedBackend([Script(text=words(3))], capabilities=SYNC)
    result = await Orchestrator(backend, defaults=SamplingParams(max_tokens=8)).run(watcher, PROBLEM)
    assert result.answer == "2" and watcher.seen.count((3, True)) == 2  # each choice's last token


@pytest.mark.anyio
@pytest.mark.parametrize("caps", [None, SYNC])
async def test_ffs_k_breaks_a_tie_by_sample_order_as_the_reference(caps: Capabilities | None) -> None:
    # sample 1 finishes first with 5, sample 0 second with 4: one vote each, sample 0's comes first
    scripts = [Script(text=words(9, "4"), token_delay=0.01), Script(text=words(3, "5"), token_delay=0.01)]
    result, _ = await run(FFS(n=2, k=2), scripts, caps=caps)
    finished = sorted(samples(result), key=lambda t: t.end or 0.0)
    assert [t.answer for t in finished] == ["5", "4"]  # finishing order
    in_sample_order = [t.answer for t in sorted(samples(result), key=lambda t: t.id)]
    assert result.answer == ref.ffs_vote([a for a in in_sample_order if a is not None]) == "4"


def test_beam_survivors_are_the_references_argsort_tail_ties_to_the_later_beam() -> None:
    rng = random.Random(3)
    cfg = BeamSearch(n=16, m=4, verifier=VERIFIER).config
    for _ in range(400):
        scores = [rng.choice([0.1, 0.5, 0.9]) for _ in range(rng.randint(1, 16))]
        width = rng.randint(1, len(scores))
        paths = [Path(("s",), (i,), (score,)) for i, score in enumerate(scores)]
        kept = survivors(paths, cfg, width)
        assert {p.last_id for p in kept} == ref.beam_survivors(scores, width)
        assert [p.last_id for p in kept] == sorted(p.last_id for p in kept)  # in beam order


def test_beam_order_is_the_references_list_of_duplicated_beams() -> None:
    for kept, n in ((1, 4), (2, 4), (3, 8), (4, 16), (5, 16)):
        counts = proposal_counts(kept, n, 4, refill=True)
        grown = [[Path(("s",), (b * 100 + j,)) for j in range(count)] for b, count in enumerate(counts)]
        order = [p.last_id // 100 for p in beam_order(grown, refill=True)]
        assert order == ref.beam_list(range(kept), n)


# N=4, M=2: four first steps of equal value; the reference keeps the later two (a3, a4).
TIED: Tree = {
    (): ["a1", "a2", "a3", "a4"],
    ("a3",): ["c3 \\boxed{3}"],
    ("a4",): ["c4 \\boxed{4}"],
    ("a1",): ["c1 \\boxed{1}"],
    ("a2",): ["c2 \\boxed{2}"],
}


@pytest.mark.anyio
async def test_beam_search_keeps_the_later_of_equal_beams() -> None:
    strategy = BeamSearch(n=4, m=2, verifier=VERIFIER, max_depth=2)
    result, _, _ = await run_search(strategy, TIED, {"a1": 0.5, "a2": 0.5, "a3": 0.5, "a4": 0.5})
    step = by_text(result)
    grown = {t.parents[0] for t in result.traces if t.kind == "sample" and t.parents}
    assert grown == {step["a3"].id, step["a4"].id}


SPELLINGS = ("4", "4.0", "\\frac{1}{2}", "0.5", "1/2", "x+1", "1+x", "2", None)


def test_rsa_votes_as_the_references_math_verify_clusters() -> None:
    rng = random.Random(9)
    for _ in range(300):
        answers = [rng.choice(SPELLINGS) for _ in range(rng.randint(1, 8))]
        want = ref.rsa_majority([a or "" for a in answers], ref.rsa_is_equiv)
        got = cluster_winner(answers)
        if want == "":  # every group a single answer, an unanswered member first: the reference
            answered = [a for a in answers if a is not None]  # answers "", paragen the first answer
            assert (got is None) if not answered else (got is not None and answers[got] == answered[0])
        else:
            assert got is not None and answers[got] == want


@pytest.mark.anyio
@pytest.mark.parametrize(("vote", "answer"), [("math_verify", "0.5"), ("key", "2")])
async def test_rsa_final_vote_groups_by_math_verify_unless_asked_for_keys(vote: str, answer: str) -> None:
    scripts = [Script(text=words(2, a)) for a in ("2", "0.5", "\\frac{1}{2}")]
    result, _ = await run(RSA(n=3, k=1, t=0, vote=vote), scripts, caps=SYNC)
    assert result.answer == answer


def test_weighted_bon_sums_as_search_and_learn_when_every_solution_has_an_answer() -> None:
    # canonical forms are the answers themselves here (sympy leaves "1", "2", "3" as they are);
    # binary-fraction scores make equal sums exact, so ties go to the first in sample order
    rng = random.Random(4)
    for _ in range(500):
        answers = [rng.choice(["1", "2", "3", None]) for _ in range(rng.randint(1, 8))]
        scores = [rng.choice([0.25, 0.5, 0.75]) for _ in answers]
        want = ref.weighted_largest_sum([a or "" for a in answers], scores, lambda a: a)
        got = weighted_answer(answers, scores, "sum")
        if want != "":
            assert got == want
        else:  # the reference's unanswered solutions are one group, "", which can win;
            answered = [(a, s) for a, s in zip(answers, scores, strict=True) if a is not None]
            assert got == (  # paragen leaves them out
                ref.weighted_largest_sum([a for a, _ in answered], [s for _, s in answered], lambda a: a)
                if answered
                else None
            )


# N=4, M=2: a first step written twice; its copies rank once, so b is kept beside it.
TWICE: Tree = {
    (): ["a", "a", "b", "c"],
    ("a",): ["d \\boxed{1}"],
    ("b",): ["e \\boxed{2}"],
}


@pytest.mark.anyio
@pytest.mark.parametrize(("filtered", "parents"), [(True, {"a", "b"}), (False, {"a"})])
async def test_beam_search_ranks_a_text_written_twice_once_as_the_recipes(
    filtered: bool, parents: set[str]
) -> None:
    strategy = BeamSearch(n=4, m=2, verifier=VERIFIER, max_depth=2, filter_duplicates=filtered)
    result, _, _ = await run_search(strategy, TWICE, {"a": 0.9, "b": 0.5, "c": 0.4})
    texts = {t.id: t.text for t in result.traces if t.kind == "sample"}
    grown = {texts[t.parents[0]] for t in result.traces if t.kind == "sample" and t.parents}
    assert grown == parents
