"""The built-in single / majority / best_of_n / adaptive_consistency strategies, run end to end.

Timing is the scripted backend's: a sample's ``first_delay`` and ``token_delay`` decide the order
in which samples finish, so "first seen" and "cancelled while running" are exact, not tolerances.
"""

from __future__ import annotations

import pytest
from strategy_helpers import PROBLEM, run, samples, words

from paragen import ChatMessage, Orchestrator, SamplingParams, build_strategy
from paragen.backends.base import Capabilities
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.errors import ConfigError
from strategies.adaptive import AdaptiveConsistency
from strategies.best_of_n import BestOfN
from strategies.majority import Majority
from strategies.single import Single

pytestmark = pytest.mark.anyio


async def test_single_samples_once_and_extracts_the_answer() -> None:
    result, backend = await run(Single(temperature=0.0), [Script(text=words(4, "5"))])
    assert (result.answer, result.text) == ("5", words(4, "5"))
    assert len(backend.streams) == 1 and backend.streams[0].request.params.temperature == 0.0
    assert result.usage.total_tokens == 4 and result.usage.sequential_tokens == 4


async def test_single_with_a_failed_sample_has_no_answer() -> None:
    result, _ = await run(Single(), [Script(text=words(4, "5"), fail="http500")])
    assert result.answer is None and [t.status for t in result.traces] == ["error"]
    assert result.stop_reason == "done" and result.usage.num_errors == 1


async def test_majority_votes_ignoring_no_answer_and_failures() -> None:
    scripts = [
        Script(text=words(3, "7")),
        Script(text=words(3, "5")),
        Script(text="no answer at all"),
        Script(text=words(3, "5")),
        Script(text=words(3, "7"), fail="http500"),
    ]
    result, backend = await run(Majority(n=5), scripts)
    assert result.answer == "5"
    assert result.metrics == {"votes_for_winner": 2.0, "distinct_answers": 2.0}
    assert len(backend.streams) == 5 and result.usage.num_samples == 5
    assert sorted(str(t.answer) for t in samples(result)) == ["5", "5", "7", "None", "None"]


async def test_majority_tie_goes_to_the_answer_that_finished_first() -> None:
    scripts = [  # "3" is started first but finishes last; "8" finishes first
        Script(text=words(3, "3"), first_delay=0.03),
        Script(text=words(3, "8"), first_delay=0.0),
        Script(text=words(3, "3"), first_delay=0.02),
        Script(text=words(3, "8"), first_delay=0.01),
    ]
    result, _ = await run(Majority(n=4), scripts)
    assert result.answer == "8"
    assert result.text == words(3, "8")


async def test_best_of_n_takes_the_highest_mean_logprob_with_an_answer() -> None:
    # the scripted backend's log-probability falls with the position (-0.1, -0.2, -0.3, ...), so
    # the shortest sample is the surest; a surer sample without an answer does not count
    scripts = [
        Script(text=words(6, "4")),
        Script(text=words(2, "9")),
        Script(text="x"),
        Script(text=words(4, "1")),
    ]
    result, backend = await run(BestOfN(n=4), scripts)
    assert result.answer == "9"
    assert result.metrics["best_score"] == pytest.approx(-0.15)
    assert all(s.request.params.logprobs for s in backend.streams)


async def test_best_of_n_with_the_shortest_scorer_and_without_logprobs() -> None:
    scripts = [Script(text=words(6, "4")), Script(text=words(3, "9"))]
    result, backend = await run(BestOfN(n=2, scorer="shortest"), scripts, caps=Capabilities())
    assert result.answer == "9" and not any(s.request.params.logprobs for s in backend.streams)
    with pytest.raises(ConfigError, match="logprobs"):
        await run(BestOfN(n=2), scripts, caps=Capabilities())
    nothing, _ = await run(BestOfN(n=2), [Script(text="no answer")])
    assert nothing.answer is None


async def test_adaptive_consistency_stops_once_settled_and_cancels_the_rest() -> None:
    # All agree: the Beta rule settles after 4 votes (P = 31/32 >= 0.95); the fifth sample of the
    # batch is still waiting for its first token and is cancelled with reason "settled".
    scripts = [Script(text=words(3, "5"), first_delay=0.01 * i) for i in range(4)]
    scripts.append(Script(text=words(3, "5"), first_delay=10.0))
    result, backend = await run(AdaptiveConsistency(n=10, batch=5), scripts)
    assert result.answer == "5"
    assert [t.status for t in result.traces] == ["ok"] * 4 + ["cancelled"]
    assert result.traces[4].cancel_reason == "settled" and result.traces[4].completion_tokens == 0
    assert len(backend.streams) == 5 and all(s.closed is not None for s in backend.streams)


async def test_adaptive_consistency_draws_batches_until_n_when_votes_split() -> None:
    # 10 ms apart, so each batch's first choice is seen first (samples due at once finish in the
    # order the event loop runs them, which trio shuffles).
    scripts = [Script(text=words(3, a), first_delay=0.01 * i) for i, a in enumerate(("1", "2", "3", "4"))]
    result, backend = await run(AdaptiveConsistency(n=6, batch=2), scripts)
    assert result.usage.num_samples == 6 and len(backend.streams) == 6
    assert [s.request.params.seed for s in backend.streams] == [None] * 6  # the run's default: no seed
    assert result.answer == "1"  # 1 and 2 have two votes each; "1" was seen first


async def test_adaptive_consistency_gives_each_batch_new_seeds() -> None:
    backend = ScriptedBackend([Script(text=words(3, a)) for a in ("1", "2", "3")])
    orchestrator = Orchestrator(backend, defaults=SamplingParams(seed=10))
    await orchestrator.run(AdaptiveConsistency(n=4, batch=2), PROBLEM)
    seeds = [s.request.params.seed or 0 for s in backend.streams]  # a batch's samples open in any order
    assert [sorted(seeds[:2]), sorted(seeds[2:])] == [[10, 11], [12, 13]]


async def test_serves_own_strategies_run_alone_on_the_question() -> None:
    """passthrough and tool_vote (what paragen serve runs) without a request's messages: the question."""
    one, backend = await run(build_strategy("passthrough"), ["four"])
    assert one.text == "four" and one.answer is None
    assert backend.streams[0].request.messages == (ChatMessage(role="user", content=PROBLEM.question),)
    voted, _ = await run(build_strategy("tool_vote", {"n": 3}), ["a", "b", "c"])
    assert voted.text == "a" and voted.details["tool_vote"]["voters"] == 3
