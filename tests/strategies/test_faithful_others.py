"""FFS-k, DeepPrune, RSA and beam search against their references (art_of_tts's evaluation,
the DeepPrune paper, HyperPotatoNeo/RSA, search-and-learn), and the fan-out's last delta."""

from __future__ import annotations

import random

import pytest
from reference_rules import beam_duplicates, ffs_k
from search_helpers import VERIFIER, Tree, by_text, run_search
from strategy_helpers import PROBLEM, SYNC, run, words

from paragen import BaseStrategy, RunContext, StrategyConfig
from paragen._live import LiveSample
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.errors import ConfigError
from paragen.orchestrator import Orchestrator
from paragen.types import Problem, SamplingParams, StrategyResult
from strategies.beam_search import BeamSearch, proposal_counts
from strategies.deepprune import DeepPrune
from strategies.ffs import offline_ffs_k
from strategies.rsa import RSA


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
