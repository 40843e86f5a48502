"""CISC: softmax weights by hand, the authors' parsing rules, and the live strategy's calls."""

from __future__ import annotations

import math
import re

import pytest
from strategy_helpers import PROBLEM, RewritingBackend, run, samples

from evals.analysis.bank import BankProblem, cisc_offline, finish_order
from paragen.backends.base import Capabilities
from paragen.backends.scripted import Script, ScriptedBackend, fanout_choice
from paragen.errors import ConfigError
from paragen.types import Delta, GenerateRequest
from strategies._certainty import cisc_vote, p_true, parse_verbal, sequence_probability, softmax
from strategies.cisc import CISC, P_TRUE_PROMPT, VERBAL_PROMPT, upto_answer

CAPS = Capabilities(logprobs=True, continue_final=True, top_logprobs=20)
PATHS = ["so \\boxed{7}", "hence \\boxed{3}", "thus \\boxed{3}"]  # majority says 3


def test_softmax_weights_by_hand() -> None:
    # T = 0.5: c / T = [2, 1, 1]; exp(c/T - 2) = [1, e^-1, e^-1] = [1, 0.36788, 0.36788], sum 1.73576
    assert softmax([1.0, 0.5, 0.5], 0.5) == pytest.approx([0.57612, 0.21194, 0.21194], abs=1e-5)
    winner, voters, weights = cisc_vote(["7", "3", "3"], [1.0, 0.5, 0.5], 0.5)
    assert (winner, voters) == ("7", [0, 1, 2])  # 0.576 for 7 beats 0.424 for 3
    # T = 2: c / T = [0.5, 0.25, 0.25]; weights [1, 0.7788, 0.7788] / 2.5576 = [0.3910, 0.3045, 0.3045]
    winner, _, weights = cisc_vote(["7", "3", "3"], [1.0, 0.5, 0.5], 2.0)
    assert weights == pytest.approx([0.3910, 0.3045, 0.3045], abs=1e-4)
    assert winner == "3"  # a flatter softmax lets the two 3s (0.609) outweigh the one 7


def test_paths_without_an_answer_or_a_confidence_are_left_out_of_the_softmax() -> None:
    winner, voters, weights = cisc_vote(["7", None, "3"], [0.2, 0.9, None], 0.2)
    assert (winner, voters, weights) == ("7", [0], [1.0])  # 0.9 would have dominated the normaliser
    assert cisc_vote([None], [None], 0.2) == (None, [], [])


def test_a_tie_goes_to_the_answer_that_finished_first() -> None:
    winner, _, weights = cisc_vote(["3", "7"], [0.5, 0.5], 0.2)
    assert weights == [0.5, 0.5] and winner == "3"


def test_confidences_are_read_as_the_authors_code_reads_them() -> None:
    assert sequence_probability([math.log(0.5), math.log(0.5)]) == pytest.approx(0.5)
    assert sequence_probability([-1.0, -3.0]) == pytest.approx(math.exp(-2.0))  # geometric mean
    assert sequence_probability([]) is None
    assert p_true("1", math.log(0.8)) == pytest.approx(0.8)
    assert p_true(" 0", math.log(0.8)) == pytest.approx(0.2)  # P("1") = 1 - P("0")
    assert p_true("yes", -0.1) is None and p_true("1", None) is None
    readings = {
        "85)": 85.0,
        "85%) sure": 85.0,
        " 7.5) ok": 7.5,
        "101)": 0.0,
        "-3)": 0.0,
        "high)": 0.0,
        "": 0.0,
    }
    assert {text: parse_verbal(text) for text in readings} == readings
    assert upto_answer("a \\boxed{\\frac{1}{2}} done.") == "a \\boxed{\\frac{1}{2}}"
    assert upto_answer("no box") == "no box"


def rater(paths: list[str], rating: dict[str, str]) -> ScriptedBackend:
    """Samples: the i-th choice writes paths[i]; a confidence call answers as ``rating`` says for
    the boxed answer of the path it continues."""

    def respond(request: GenerateRequest, index: int) -> Script:
        last = (request.messages or ())[-1]
        if request.continue_final:
            answer = re.findall(r"\\boxed\{(\d+)\}", last.content)[-1]
            return Script(text=rating[answer])
        return Script(text=paths[fanout_choice(request, index)[1]])

    return ScriptedBackend(respond, capabilities=CAPS)


@pytest.mark.anyio
async def test_p_true_makes_one_score_call_per_path_and_outvotes_the_majority() -> None:
    backend = rater(PATHS, {"7": "1", "3": "0"})
    result, _ = await run(CISC(n=3, confidence="p_true"), backend)
    assert result.answer == "7"
    scores = [t for t in result.traces if t.kind == "score"]
    assert len(samples(result)) == 3 and len(scores) == 3
    by_id = {t.id: t for t in samples(result)}
    for call in scores:  # one greedy token, a child of the path it rates, counted apart
        assert call.completion_tokens == 1 and len(call.parents) == 1 and call.parents[0] in by_id
    asked = [s.request for s in backend.streams if s.request.continue_final]
    assert all(r.params.max_tokens == 1 and r.params.temperature == 0.0 and r.params.logprobs for r in asked)
    assert all((r.messages or ())[-1].content.endswith(P_TRUE_PROMPT) for r in asked)
    # the scripted backend's first token has log p = -0.1: P(True) 0.9048 for 7, 0.0952 for each 3;
    # at T = 0.2 the weights are [0.9663, 0.0169, 0.0169]
    weights = softmax([math.exp(-0.1), 1 - math.exp(-0.1), 1 - math.exp(-0.1)], 0.2)
    assert weights == pytest.approx([0.9663, 0.0169, 0.0169], abs=1e-4)
    assert result.usage.num_scores == 3
    assert result.usage.score_tokens == sum(t.prompt_tokens + t.completion_tokens for t in scores)
    assert result.usage.total_tokens == sum(t.completion_tokens for t in samples(result))
    assert result.metrics["voters"] == 3 and result.metrics["softmax_temperature"] == 0.2


@pytest.mark.anyio
async def test_verbal_asks_for_ten_tokens_and_an_unreadable_rating_counts_zero() -> None:
    backend = rater(PATHS, {"7": "90) I am sure", "3": "no idea"})
    result, _ = await run(CISC(n=3, confidence="verbal"), backend)
    asked = [s.request for s in backend.streams if s.request.continue_final]
    assert len(asked) == 3 and all(r.params.max_tokens == 10 for r in asked)
    assert all((r.messages or ())[-1].content.endswith(VERBAL_PROMPT) for r in asked)
    # 90 / 20 = 4.5 against 0 twice: weights [0.978, 0.011, 0.011]
    assert result.answer == "7" and result.metrics["softmax_temperature"] == 20.0
    assert sorted(t.meta["cisc_confidence"] for t in samples(result)) == [0.0, 0.0, 90.0]


def _logprob_of(delta: Delta) -> None:
    """A token ``lp<k>`` was sampled with log-probability -k / 10."""
    match = re.match(r"\s*lp(\d+)", delta.text)
    delta.logprobs = (-int(match.group(1)) / 10 if match else -1.0,)


@pytest.mark.anyio
async def test_sequence_probability_needs_no_extra_call_and_matches_the_bank() -> None:
    paths = ["lp1 lp1 \\boxed{7}", "lp9 lp9 \\boxed{3}", "lp8 lp9 \\boxed{3}"]
    backend = RewritingBackend(
        lambda r, i: Script(text=paths[fanout_choice(r, i)[1]]), _logprob_of, capabilities=CAPS
    )
    result, _ = await run(CISC(n=3, confidence="sequence_probability"), backend)
    assert not [t for t in result.traces if t.kind == "score"] and result.usage.score_tokens == 0
    # exp(mean): 7 -> exp(-0.4) = 0.670, 3 -> exp(-0.933) = 0.393 and exp(-0.9) = 0.407; at T = 0.2 the
    # 7 weighs exp(3.35) against exp(1.97) + exp(2.03): 28.5 > 14.8
    assert result.answer == "7"
    traces = sorted(samples(result), key=finish_order)
    item = BankProblem(PROBLEM.id, "7", traces, [t.answer for t in traces])
    assert cisc_offline(item, {("7", "7"): True, ("3", "7"): False})  # the bank picks the same answer
    assert not cisc_offline(item, {("7", "7"): True, ("3", "7"): False}, temperature=50.0)  # flat: majority


@pytest.mark.anyio
async def test_capabilities_are_checked_before_any_sample() -> None:
    no_logprobs = Capabilities(continue_final=True)
    with pytest.raises(ConfigError):
        await run(CISC(confidence="p_true"), ["x"], caps=no_logprobs)
    with pytest.raises(ConfigError):
        await run(CISC(confidence="verbal"), ["x"], caps=Capabilities(logprobs=True))
    result, _ = await run(CISC(n=2, confidence="verbal"), ["\\boxed{4}"] * 2, caps=no_logprobs)
    assert result.answer == "4"
