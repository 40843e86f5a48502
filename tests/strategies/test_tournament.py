"""Knockout tournament: seeded games, the verdict tag, who leaves each round, the fallback, the final vote."""

from __future__ import annotations

import random

import pytest
from reading_helpers import (
    ANSWERS,
    candidate_text,
    labelled,
    prompt_of,
    prompt_tokens,
    run_reading,
    shown_order,
)

from paragen.backends.scripted import ScriptedBackend, StreamRecord
from paragen.errors import ConfigError
from paragen.types import StrategyResult, Trace
from strategies._reading import last_number, reading_rng
from strategies.tournament import VERDICT, Tournament, games_of, judge_prompt


def best_by_answer(prompt: str, order: list[int]) -> str:
    """A judge that names the shown candidate with the largest answer (1-based, as asked)."""
    best = max(range(len(order)), key=lambda j: int(ANSWERS[order[j]]))
    return (
        f"first thought <best_solution>1</best_solution> but then <best_solution> {best + 1} </best_solution>"
    )


def replay(
    n: int, k: int, winner_count: int, choose: str = "best"
) -> tuple[list[list[list[int]]], list[int]]:
    """The games each round and the knocked-out list, drawn as the strategy draws them."""
    rng = reading_rng("tournament", 7, "p")
    out: list[int] = []
    rounds: list[list[list[int]]] = []
    while len(out) < n - winner_count:
        remaining = [i for i in range(n) if i not in out]
        rng.shuffle(remaining)
        games = games_of(remaining, k)
        if not games:
            break
        fallbacks = [random.Random(rng.getrandbits(32)) for _ in games]
        rounds.append(games)
        for game, fallback in zip(games, fallbacks, strict=True):
            if choose == "best":
                winner = max(game, key=lambda i: int(ANSWERS[i]))
            else:
                winner = game[fallback.randrange(len(game))]
            out += [i for i in game if i != winner]
    return rounds, out[: n - winner_count]


def games_played(result: StrategyResult) -> list[list[list[int]]]:
    reads = labelled(result, "round")
    count = int(result.metrics["rounds"])
    return [sorted(t.meta["read"] for t in reads if t.meta["round"] == r) for r in range(count)]


def test_prompt_verdict_and_games() -> None:
    prompt = judge_prompt("{question}|{count}|{solutions}", "Q?", ["a", "b"])
    assert prompt == "Q?|2|--- Solution 1 ---\na\n\n--- Solution 2 ---\nb"
    assert last_number(VERDICT, "<best_solution>1</best_solution> <best_solution>\n2\n</best_solution>") == 2
    assert last_number(VERDICT, "<best_solution>two</best_solution>") is None
    assert games_of([3, 0, 2, 1, 4], 2) == [[3, 0], [2, 1]]  # the lone leftover waits
    with pytest.raises(ConfigError):
        Tournament(n=2, winner_count=3)


@pytest.mark.anyio
async def test_pairwise_knockout_to_one_winner_is_exact() -> None:
    result, backend = await run_reading(Tournament(n=4), best_by_answer)
    rounds, out = replay(4, 2, 1)
    assert games_played(result) == [sorted(g) for g in rounds] and len(rounds) == 2
    reads, cands = labelled(result, "round"), labelled(result, "candidates")
    assert sorted(t.label for t in reads) == ["round0/game", "round0/game", "round1/game"]
    assert all(t.kind == "sample" for t in reads) and len(backend.streams) == 1 + 3
    for trace in reads:
        assert trace.parents == [cands[i].id for i in trace.meta["read"]]
        assert trace.meta["pick"] == max(trace.meta["read"], key=lambda i: int(ANSWERS[i]))
    for stream in backend.streams[1:]:
        prompt = prompt_of(stream.request)
        assert all(candidate_text(i) in prompt for i in shown_order(prompt)) and len(shown_order(prompt)) == 2
    assert result.answer == "6" and sorted(out) == [0, 1, 2]
    assert result.metrics == {
        "rounds": 2.0,
        "games": 3.0,
        "unparsable": 0.0,
        "invalid": 0.0,
        "winners": 1.0,
        "votes_for_winner": 1.0,
        "distinct_answers": 1.0,
    }
    assert result.usage.total_tokens == 18 + sum(t.completion_tokens for t in reads)
    assert all(t.prompt_tokens == prompt_tokens(prompt_of(s.request)) for t, s in _paired(result, backend))


def _paired(result: StrategyResult, backend: ScriptedBackend) -> list[tuple[Trace, StreamRecord]]:
    """Each game's trace with the stream that served it (matched by the candidates it showed)."""
    by_order = {tuple(shown_order(prompt_of(s.request))): s for s in backend.streams[1:]}
    return [(t, by_order[tuple(t.meta["read"])]) for t in labelled(result, "round")]


@pytest.mark.anyio
async def test_unparsable_verdicts_pick_seeded_random_winners() -> None:
    result, _ = await run_reading(Tournament(n=4), lambda prompt, order: "both are good")
    rounds, out = replay(4, 2, 1, choose="random")
    assert games_played(result) == [sorted(g) for g in rounds]
    (winner,) = [i for i in range(4) if i not in out]
    assert result.answer == ANSWERS[winner] and result.metrics["unparsable"] == 3.0
    assert all(t.meta["parsed"] is False for t in labelled(result, "round"))
    zero, _ = await run_reading(Tournament(n=2), lambda prompt, order: "<best_solution>0</best_solution>")
    assert zero.metrics["unparsable"] == 1.0  # 0 is no solution's number (NeMo-Skills took the last)


@pytest.mark.anyio
async def test_several_winners_vote_and_extra_eliminations_are_undone() -> None:
    # One game of four knocks out three; two must remain, so the last one knocked out comes back.
    result, _ = await run_reading(Tournament(n=4, group_size=4, winner_count=2), best_by_answer)
    (game,) = labelled(result, "round")
    losers = [i for i in game.meta["read"] if i != 3]
    assert sorted(game.meta["read"]) == [0, 1, 2, 3] and game.meta["pick"] == 3
    assert result.metrics["winners"] == 2.0 and result.metrics["games"] == 1.0
    back = losers[-1]
    assert result.metrics["distinct_answers"] == float(len({ANSWERS[3], ANSWERS[back]}))
    # 1-1 between the two winners: the first in candidate order gives the answer.
    assert result.answer == ANSWERS[min(3, back)]


@pytest.mark.anyio
async def test_empty_candidates_leave_before_the_first_game() -> None:
    texts = [candidate_text(0), "", candidate_text(2), candidate_text(3)]
    result, backend = await run_reading(Tournament(n=4), best_by_answer, texts=texts)
    assert result.metrics["invalid"] == 1.0 and result.metrics["games"] == 2.0
    assert all(1 not in t.meta["read"] for t in labelled(result, "round"))
    assert result.answer == "6" and len(backend.streams) == 1 + 2
