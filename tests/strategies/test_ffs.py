"""FFS: pure selection rules and timed runs on the scripted backend."""

from __future__ import annotations

import pytest
from strategy_helpers import SYNC, by_choice, run, samples, words

from paragen.backends.scripted import Script
from paragen.errors import ConfigError
from paragen.types import Trace
from strategies.ffs import FFS, OPENERS, LFSk, first_k, longest_k, offline_ffs_k


def _t(i: int, tokens: int, answer: str | None, finish: str = "stop", status: str = "ok") -> Trace:
    return Trace(id=i, completion_tokens=tokens, answer=answer, finish_reason=finish, status=status)


def test_first_k_skips_unusable_finishers() -> None:
    done = [
        _t(0, 5, None),
        _t(1, 6, "3", "length"),
        _t(2, 7, "4"),
        _t(3, 9, "4"),
        _t(4, 2, "1", status="cancelled"),
    ]
    assert [t.id for t in first_k(done, 2, allow_truncated=False, require_answer=True)] == [2, 3]
    assert [t.id for t in first_k(done, 2, allow_truncated=True, require_answer=True)] == [1, 2]
    assert [t.id for t in first_k(done, 1, allow_truncated=False, require_answer=False)] == [0]


def test_longest_k_picks_the_longest_usable() -> None:
    done = [_t(0, 5, "1"), _t(1, 50, "2", "length"), _t(2, 9, "3"), _t(3, 7, "4")]
    assert [t.id for t in longest_k(done, 2, allow_truncated=False, require_answer=True)] == [2, 3]


def test_offline_ffs_k_follows_the_reference_evaluation() -> None:
    voters, cutoff = offline_ffs_k([30, 10, 20, 10, 5], ["a", "b", "c", "d", None], k=2)
    assert (sorted(voters), cutoff) == ([1, 3], 10)  # ties at the cutoff all vote; NO_ANSWER never does
    assert offline_ffs_k([3], [None], 1) == ([], 3)  # no k-th answer: the wait is for the longest sample


@pytest.mark.anyio
async def test_async_ffs_first_finisher_wins_and_the_rest_are_cancelled() -> None:
    scripts = [
        Script(text=words(20, "9"), token_delay=0.1),  # 3 tokens by the time the winner ends (t=0.25)
        Script(text=words(3, "5"), first_delay=0.25),  # the winner: 3 tokens at t=0.25
        Script(text=words(5, "7"), first_delay=5.0),  # never starts before the end
    ]
    result, backend = await run(FFS(n=3), scripts)
    traces = samples(result)
    assert result.answer == "5"
    winner = next(t for t in traces if t.status == "ok")
    assert winner.completion_tokens == 3
    losers = [t for t in traces if t is not winner]
    assert {t.status for t in losers} == {"cancelled"}
    assert {t.cancel_reason for t in losers} == {"first-finish"}
    assert sorted(t.completion_tokens for t in losers) == [0, 3]
    # On the script's own clock: the slow loser had sent exactly its 3 tokens due by t=0.25 and no
    # more, and the late one was closed before its first token was due (at t=5).
    assert all((t.end or 0) >= (winner.end or 0) for t in losers)
    streams = by_choice(backend.streams)
    assert [s.tokens_sent for s in streams] == [3, 3, 0]
    assert result.usage.total_tokens == 6 and result.usage.sequential_tokens == 3
    assert len(streams) == 3 and all(s.closed is not None for s in streams)
    late = streams[2]
    assert (late.closed or 0) - late.opened < scripts[2].first_delay


@pytest.mark.anyio
async def test_sync_ffs_runs_one_batch_and_aborts_the_other_choices() -> None:
    scripts = [Script(text=words(10, "8"), token_delay=0.05), Script(text=words(2, "5"), token_delay=0.05)]
    result, backend = await run(FFS(n=2), scripts, caps=SYNC)
    assert result.answer == "5"
    assert len(backend.streams) == 1 and backend.streams[0].request.n == 2
    assert backend.streams[0].aborted == [0]
    loser = next(t for t in samples(result) if t.status != "ok")
    assert loser.completion_tokens == 2  # one token per step, stopped in the winner's step


@pytest.mark.anyio
async def test_ffs_skips_no_answer_and_truncated_finishers_unless_allowed() -> None:
    scripts = [
        Script(text="no answer here", token_delay=0.01),
        Script(text=words(4, "6"), token_delay=0.01, finish_reason="length"),
        Script(text=words(8, "5"), token_delay=0.02),
    ]
    strict, _ = await run(FFS(n=3), scripts)
    assert strict.answer == "5"
    loose, _ = await run(FFS(n=3, allow_truncated=True), scripts)
    assert loose.answer == "6"


@pytest.mark.anyio
async def test_ffs_k_votes_over_the_first_k() -> None:
    scripts = [
        Script(text=words(3, "4"), token_delay=0.02),
        Script(text=words(4, "5"), token_delay=0.02),
        Script(text=words(5, "5"), token_delay=0.02),
        Script(text=words(30, "4"), token_delay=0.02),
    ]
    result, _ = await run(FFS(n=4, k=3), scripts)
    assert result.answer == "5" and result.metrics["finishers_voted"] == 3
    assert [t.status for t in samples(result)].count("cancelled") == 1


@pytest.mark.anyio
async def test_lfs_k_waits_for_all_and_votes_over_the_longest() -> None:
    scripts = [Script(text=words(3, "4"), token_delay=0.01)] * 2 + [
        Script(text=words(9, "5"), token_delay=0.01)
    ] * 2
    result, _ = await run(LFSk(n=4, k=2), scripts)
    assert result.answer == "5"
    assert all(t.status == "ok" for t in samples(result))


@pytest.mark.anyio
async def test_diversifying_openers_prefill_distinct_assistant_messages() -> None:
    result, backend = await run(FFS(n=3, diversify=True), [Script(text=words(3, "5"), token_delay=0.01)])
    firsts = [s.request.messages[-1] for s in backend.streams if s.request.messages]
    assert [m.role for m in firsts] == ["assistant"] * 3
    assert sorted(m.content for m in firsts) == sorted(OPENERS[:3])  # one each, opened in any order
    assert all(s.request.continue_final for s in backend.streams)
    assert result.answer == "5"


@pytest.mark.anyio
async def test_k_above_n_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        await run(FFS(n=2, k=3), [Script(text="x")])
