"""Self-certainty: the KL by hand, its top-k estimate against the exact one, Borda and best-of-N."""

from __future__ import annotations

import math
import re

import pytest
from strategy_helpers import PROBLEM, RewritingBackend, run, samples

from evals.analysis.bank import BankProblem, finish_order, self_certainty_offline
from paragen.backends.base import Capabilities
from paragen.backends.scripted import Script, fanout_choice
from paragen.errors import ConfigError
from paragen.types import Delta
from strategies._certainty import (
    best_scored,
    borda_vote,
    borda_weights,
    exact_self_certainty,
    self_certainty,
    token_self_certainty,
)
from strategies.self_certainty import SelfCertainty

CAPS = Capabilities(logprobs=True, top_logprobs=20)
LOG = math.log


def test_exact_self_certainty_by_hand() -> None:
    # V = 4, p = [0.9, 0.05, 0.03, 0.02]: -log 4 - (1/4)(-0.105361 - 2.995732 - 3.506558 - 3.912023)
    exact = exact_self_certainty([LOG(0.9), LOG(0.05), LOG(0.03), LOG(0.02)])
    assert exact == pytest.approx(-1.386294 + 10.519674 / 4, abs=1e-6)  # 1.243624
    assert exact_self_certainty([LOG(0.25)] * 4) == pytest.approx(0.0, abs=1e-12)  # uniform: KL 0


def test_the_top_k_estimate_is_a_lower_bound_that_tightens_with_k() -> None:
    exact = exact_self_certainty([LOG(0.9), LOG(0.05), LOG(0.03), LOG(0.02)])  # 1.243624
    # k = 1: 0.1 left over 3 tokens: -log 4 - (1/4)(log 0.9 + 3 log(0.1/3)) = 1.190944
    top1 = token_self_certainty([LOG(0.9)], LOG(0.9), 4)
    assert top1 == pytest.approx(1.190944, abs=1e-6)
    # k = 2: 0.05 over 2 tokens: -log 4 - (1/4)(log 0.9 + log 0.05 + 2 log 0.025) = 1.233419
    top2 = token_self_certainty([LOG(0.9), LOG(0.05)], LOG(0.9), 4)
    assert top2 == pytest.approx(1.233419, abs=1e-6)
    assert top1 < top2 < exact
    # k = V - 1: the one unknown token takes the rest, which is then exact
    assert token_self_certainty([LOG(0.9), LOG(0.05), LOG(0.03)], LOG(0.9), 4) == pytest.approx(exact)
    # exact too whenever the unknown tokens do share the rest evenly
    even = exact_self_certainty([LOG(0.9)] + [LOG(0.1 / 3)] * 3)
    assert top1 == pytest.approx(even)


def test_a_sampled_token_outside_the_top_k_is_known_too() -> None:
    # top-1 0.9; the sampled token (0.02) was not in it: known {0.9, 0.02}, 0.08 over 2 others
    with_it = token_self_certainty([LOG(0.9)], LOG(0.02), 4)
    assert with_it == pytest.approx(-LOG(4) - (LOG(0.9) + LOG(0.02) + 2 * LOG(0.04)) / 4)
    assert self_certainty([LOG(0.9), LOG(0.5)], [[LOG(0.9)], [LOG(0.5)]], 4) == pytest.approx(
        (token_self_certainty([LOG(0.9)], None, 4) + token_self_certainty([LOG(0.5)], None, 4)) / 2
    )
    assert self_certainty(None, None, 4) is None
    # top k summing past 1 (rounding) leaves a floor, not log(0)
    assert math.isfinite(token_self_certainty([0.0, 0.0], None, 4))


def test_borda_votes_by_hand() -> None:
    scores, answers = [3.0, 1.0, 2.0, 0.5], ["A", "B", "B", "C"]
    # ranks 1, 3, 2, 4 of N = 4: votes (N - r + 1) ** 0.5 = [2, 1.414, 1.732, 1]; A 2 < B 3.146
    assert borda_weights(scores, 0.5) == pytest.approx([2.0, math.sqrt(2), math.sqrt(3), 1.0])
    assert borda_vote(answers, scores, 0.5)[0] == "B"
    assert borda_vote(answers, scores, 0.0)[0] == "B"  # power 0: plain majority
    assert borda_vote(answers, scores, 2.0)[0] == "A"  # power 2: A 16 > B 9 + 4


def test_ties_go_to_the_first_response() -> None:
    assert borda_weights([1.0, 1.0], 1.0) == [2.0, 1.0]  # equal scores: the earlier ranks higher
    assert borda_vote(["A", "B"], [1.0, 1.0], 1.0)[0] == "A"
    assert best_scored(["A", "B"], [2.0, 2.0]) == 0
    assert best_scored([None, "B"], [5.0, 1.0]) == 1  # an unanswered response is never chosen
    assert best_scored([None], [5.0]) is None


def _certain(delta: Delta) -> None:
    """A token ``p<k>`` was sampled with probability k / 10, the top-1 of its position."""
    match = re.match(r"\s*p(\d+)", delta.text)
    lp = LOG(int(match.group(1)) / 10) if match else LOG(0.5)
    delta.logprobs, delta.top_logprobs = (lp,), ((lp,),)


PATHS = ["p9 p9 \\boxed{7}", "p3 p4 \\boxed{3}", "p5 p4 \\boxed{3}", "p2 p2 \\boxed{5}"]


def _backend() -> RewritingBackend:
    return RewritingBackend(
        lambda r, i: Script(text=PATHS[fanout_choice(r, i)[1]]), _certain, capabilities=CAPS
    )


@pytest.mark.anyio
@pytest.mark.parametrize(("mode", "power", "expected"), [("best_of_n", 0.5, "7"), ("borda", 0.5, "3")])
async def test_live_choice_agrees_with_the_bank(mode: str, power: float, expected: str) -> None:
    strategy = SelfCertainty(n=4, mode=mode, power=power, vocab_size=1000)
    backend = _backend()
    result, _ = await run(strategy, backend)
    # 7 is the surest (p 0.9 per token) and best-of-N takes it; Borda (N = 4): 7 rank 1 gets 2,
    # the 3s ranks 2 and 3 get 1.732 + 1.414 = 3.146
    assert result.answer == expected
    assert all(s.request.params.top_logprobs == 20 and s.request.params.logprobs for s in backend.streams)
    assert result.metrics["self_certainty_top_k"] == 20 and result.metrics["self_certainty_vocab"] == 1000
    assert all(
        t.meta["self_certainty_approx"] == "top-k=20, rest uniform over V-k, V=1000" for t in samples(result)
    )
    assert [t.kind for t in result.traces] == ["sample"] * 4  # no extra calls
    traces = sorted(samples(result), key=finish_order)
    item = BankProblem(PROBLEM.id, expected, traces, [t.answer for t in traces])
    verdicts = {(a, expected): a == expected for a in ("7", "3", "5")}
    assert self_certainty_offline(item, verdicts, mode=mode, power=power, vocab_size=1000)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_needs_log_probabilities() -> None:
    with pytest.raises(ConfigError):
        await run(SelfCertainty(n=2), ["\\boxed{1}"] * 2, caps=Capabilities())
