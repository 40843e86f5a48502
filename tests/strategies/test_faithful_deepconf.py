"""DeepConf decides as facebookresearch/deepconf does: paragen's functions and strategies, run for
real on the scripted backend, against the transcription in reference_rules (same inputs, same
decision). Every token of a scripted trace is ``c<k>`` (confidence k), the last one optionally
followed by its boxed answer, so both sides read the same confidences from the same text."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
import reference_rules as ref
from strategy_helpers import SYNC, RewritingBackend, run, samples

from evals.analysis.bank import BankProblem, deepconf_offline
from paragen._live import LiveSample
from paragen.backends.base import Capabilities
from paragen.backends.scripted import Script, tokenize
from paragen.types import Delta, GenerateRequest, StrategyResult, Trace
from strategies._confidence import confident_vote, keep_top, token_confidences, trace_score
from strategies.deepconf import DeepConf, DeepConfOnline

OWN = Capabilities(logprobs=True, continue_final=True, top_logprobs=20)  # one request each
SHARED = SYNC.model_copy(update={"top_logprobs": 20})  # n choices of one stream (the engine's way)
_CONF = re.compile(r"\s*c(\d+)")
Spec = tuple[Sequence[int], str | None]  # a trace: its tokens' confidences, its answer


def text_of(confs: Sequence[int], answer: str | None) -> str:
    words = [f"c{c}" for c in confs]
    if answer is not None:
        words[-1] += f"\\boxed{{{answer}}}"
    return " ".join(words)


def confs_of(text: str) -> list[float]:
    found = [_CONF.match(token) for token in tokenize(text)]
    return [float(m.group(1)) if m else 0.0 for m in found]


def _confident(delta: Delta) -> None:
    """The delta's token carries the top-k log-probabilities its ``c<k>`` spells."""
    conf = confs_of(delta.text)[0]
    delta.logprobs, delta.top_logprobs = (-conf,), ((-conf, -conf),)


def backend_for(specs: Sequence[Spec], caps: Capabilities) -> RewritingBackend:
    """The i-th choice opened writes ``specs[i]``: warm-up traces first, then the online ones."""
    order = iter(specs)

    def respond(request: GenerateRequest, index: int) -> Script:
        confs, answer = next(order)
        return Script(text=text_of(confs, answer), token_delay=0.001)

    return RewritingBackend(respond, _confident, capabilities=caps)


async def online(
    specs: Sequence[Spec], n_init: int, eta: float, caps: Capabilities, **kw: Any
) -> StrategyResult:
    # extract="boxed": the reference reads boxed answers only (paragen's "auto" also takes a last number)
    strategy = DeepConfOnline(
        n=len(specs),
        n_init=n_init,
        batch=len(specs),
        window=4,
        eta=eta,
        consensus=None,
        extract="boxed",
        **kw,
    )
    result, _ = await run(strategy, backend_for(specs, caps))
    return result


def reference_online(specs: Sequence[Spec], n_init: int, eta: float) -> tuple[str | None, float, int]:
    traces = [(answer, confs_of(text_of(c, answer))) for c, answer in specs]
    return ref.deepconf_online(traces[:n_init], traces[n_init:], eta, 4)


# -- offline: who is kept, who votes ------------------------------------------------------------------


def _random_offline(rng: random.Random) -> tuple[list[str | None], list[list[float]]]:
    n = rng.randint(1, 40)
    answers = [rng.choice(["1", "2", "3", None]) for _ in range(n)]
    confs = [[rng.randint(0, 160) / 8 for _ in range(rng.randint(1, 12))] for _ in range(n)]
    return answers, confs


def _tied(answers: Sequence[str | None], weights: Sequence[float]) -> bool:
    totals: dict[str, float] = {}
    for a, w in zip(answers, weights, strict=True):
        if a is not None:
            totals[a] = totals.get(a, 0.0) + w
    best = sorted(totals.values(), reverse=True)
    return len(best) > 1 and best[0] == best[1]


@pytest.mark.parametrize("eta", [10, 25, 34, 50, 90, 100])
def test_offline_keeps_and_votes_as_the_reference_on_random_traces(eta: float) -> None:
    rng, compared = random.Random(eta), 0
    for _ in range(300):
        answers, confs = _random_offline(rng)
        scores = [trace_score(c, 4, "lowest_group") for c in confs]
        winner, kept = confident_vote(answers, scores, eta)
        expected, expected_kept = ref.deepconf_offline(answers, confs, eta / 100, 4)
        assert sorted(kept) == expected_kept
        if not _tied([answers[i] for i in kept], [scores[i] for i in kept]):  # ties: see faithfulness.md
            assert winner == expected
            compared += 1
    assert compared > 250


def test_unanswered_traces_take_no_kept_place() -> None:
    # The two most confident of 16 never answered (a loop to the length cap): at eta=10 the
    # reference keeps the top 10% of the 14 that answered and says 7.
    answers: list[str | None] = [None, None, "7", "7", *["3"] * 12]
    confs = [[20.0], [19.0], [18.0], [17.0], *[[float(i)] for i in range(12)]]
    scores = [trace_score(c, 4) for c in confs]
    assert ref.deepconf_offline(answers, confs, 0.1, 4)[0] == "7"
    assert confident_vote(answers, scores, 10)[0] == "7"
    traces = [Trace(id=i, top_logprobs=[[-c] for c in conf]) for i, conf in enumerate(confs)]
    item = BankProblem("p", "7", traces, answers)
    verdicts = {("7", "7"): True, ("3", "7"): False}
    assert deepconf_offline(item, verdicts, keep=0.1, window=4)  # the bank's estimate, the same rule


def test_the_kept_share_is_the_references_percentile_not_a_ceil() -> None:
    for n, kept in ((16, 14), (512, 460), (10, 9), (16, 2)):
        scores = [float(i) for i in range(n)]
        eta = 90 if kept != 2 else 10
        reference = [i for i, s in enumerate(scores) if s >= np.percentile(scores, (1 - eta / 100) * 100)]
        assert keep_top(scores, eta) == reference and len(reference) == kept


def test_equal_scores_at_the_threshold_are_all_kept() -> None:
    assert keep_top([1.0, 2.0, 2.0, 2.0], 10) == [1, 2, 3]


@pytest.mark.anyio
async def test_votes_for_winner_counts_the_winners_votes() -> None:
    # One very sure trace says 3, two unsure ones say 9: the weighted vote says 3, with one vote.
    specs: list[Spec] = [([20, 20, 20, 20], "3"), ([1, 1, 1, 1], "9"), ([1, 1, 1, 1], "9")]
    result, _ = await run(DeepConf(n=3, eta=100, window=4, extract="boxed"), backend_for(specs, OWN))
    assert result.answer == "3" and result.metrics["votes_for_winner"] == 1


@pytest.mark.anyio
async def test_top_k_defaults_to_the_references_twenty() -> None:
    _, backend = await run(DeepConf(n=1, window=4), backend_for([([5, 5], "1")], OWN))
    assert DeepConf().config.top_k == 20 and backend.streams[0].request.params.top_logprobs == 20


# -- online, run for real --------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("caps", [OWN, SHARED], ids=["own", "shared"])
async def test_only_confident_warmup_traces_vote(caps: Capabilities) -> None:
    # 16 warm-up traces, no more: at eta=10 only the two most confident vote, and they say 7.
    specs: list[Spec] = [([20] * 4, "7"), ([19] * 4, "7"), *[([i + 1] * 4, "3") for i in range(14)]]
    result = await online(specs, 16, 10, caps)
    winner, bar, voters = reference_online(specs, 16, 10)
    assert (winner, voters) == ("7", 2)
    assert result.answer == winner
    assert (result.metrics["threshold"], result.metrics["voters"]) == (bar, voters)


# Warm-up: 3 (lowest group 12) and 9 (lowest group 10); at eta=100 the bar is 10 and both vote.
WARM: list[Spec] = [([12] * 4, "3"), ([10] * 4, "9")]


@pytest.mark.anyio
@pytest.mark.parametrize("caps", [OWN, SHARED], ids=["own", "shared"])
async def test_a_trace_shorter_than_a_window_is_judged_by_its_mean(caps: Capabilities) -> None:
    specs = [*WARM, ([7, 7], "9")]  # two tokens, mean 7: below the bar, so it does not vote
    result = await online(specs, 2, 100, caps)
    assert reference_online(specs, 2, 100) == ("3", 10.0, 2)
    assert result.answer == "3"
    assert result.metrics["voters"] == 2


@pytest.mark.anyio
@pytest.mark.parametrize("caps", [OWN, SHARED], ids=["own", "shared"])
async def test_a_window_falling_on_the_last_token_excludes_the_trace(caps: Capabilities) -> None:
    specs = [*WARM, ([10, 10, 10, 10, 1], "9")]  # the last window's mean is 7.75
    result = await online(specs, 2, 100, caps)
    assert reference_online(specs, 2, 100) == ("3", 10.0, 2)
    assert result.answer == "3"
    (last,) = [t for t in samples(result) if t.label == "online"]
    assert last.status == "ok" and last.meta["deepconf"] == "below threshold"
    assert result.metrics["voters"] == 2


@pytest.mark.anyio
@pytest.mark.parametrize("method", ["mean", "tail", "bottom10"])
async def test_the_threshold_comes_from_the_lowest_group_whatever_the_method(method: str) -> None:
    specs: list[Spec] = [([12, 12, 12, 12, 20, 20], "3"), ([10, 10, 10, 10, 20], "9"), ([30] * 4, "3")]
    result = await online(specs, 3, 100, OWN, method=method)
    assert result.metrics["threshold"] == reference_online(specs, 3, 100)[1] == 10.0


def _random_online(rng: random.Random, count: int) -> list[Spec]:
    return [
        ([rng.randint(1, 20) for _ in range(rng.randint(1, 9))], rng.choice(["1", "2", "3", None]))
        for _ in range(count)
    ]


@pytest.mark.anyio
@pytest.mark.parametrize("caps", [OWN, SHARED], ids=["own", "shared"])
async def test_online_decides_as_the_reference_on_random_traces(caps: Capabilities) -> None:
    rng, compared = random.Random(7), 0
    for case in range(24):
        specs, eta = _random_online(rng, 12), (10, 50, 90)[case % 3]
        winner, bar, voters = reference_online(specs, 6, eta)
        result = await online(specs, 6, eta, caps)
        assert result.metrics["threshold"] == pytest.approx(bar)
        assert result.metrics["voters"] == voters
        if not _tied_result(result):
            assert result.answer == winner
            compared += 1
    assert compared >= 12


def _tied_result(result: StrategyResult) -> bool:
    voting = [t for t in samples(result) if "confidence" in t.meta and t.answer is not None]
    return _tied([t.answer for t in voting], [t.meta["confidence"] for t in voting])


def test_the_monitor_judges_every_window_of_a_delta_of_several_tokens() -> None:
    from paragen.types import Delta
    from strategies.deepconf import confidence_monitor

    live, check = LiveSample(Trace(id=0)), confidence_monitor(threshold=5.0, window=2)
    live.add(Delta(index=0, text=" a", num_tokens=1, top_logprobs=((-9.0,),)), 0.0)
    assert check(live) is None
    # three tokens at once: windows (9, 1) = 5, (1, 1) = 1 (below), (1, 9) = 5
    rows = ((-1.0,), (-1.0,), (-9.0,))
    live.add(Delta(index=0, text=" b c d", num_tokens=3, top_logprobs=rows), 0.0)
    assert check(live) == "deepconf: low confidence"


def test_token_confidence_averages_a_sampled_token_outside_the_top_k_as_the_reference() -> None:
    rng = random.Random(11)
    for _ in range(300):
        k = rng.randint(1, 20)
        top_lps = sorted((-rng.uniform(0.0, 9.0) for _ in range(k)), reverse=True)
        rows = [[(token, lp) for token, lp in enumerate(top_lps)]]
        if rng.random() < 0.5:  # sampled from the top k: one of its entries
            sampled = rows[0][rng.randrange(k)]
        else:  # sampled outside: vLLM adds it to the dict as a (k + 1)th entry
            sampled = (1000, top_lps[-1] - rng.uniform(0.01, 5.0))
        want = ref.deepconf_compute_confidence(rows, [sampled])
        got = token_confidences([sampled[1]], [top_lps])
        assert got == pytest.approx(want, abs=5e-4 + 1e-12)  # the reference rounds to 3 decimals
        # the online processor reads the top k from the logits alone
        live = token_confidences([sampled[1]], [top_lps], with_sampled=False)
        assert live == pytest.approx([ref.deepconf_processor_conf(top_lps)])


def test_a_sampled_token_outside_the_top_k_lowers_the_confidence() -> None:
    assert token_confidences([-9.0], [[-1.0, -2.0]]) == [pytest.approx(4.0)]  # (1 + 2 + 9) / 3
    assert token_confidences([-1.0], [[-1.0, -2.0]]) == [pytest.approx(1.5)]
