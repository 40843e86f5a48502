"""GenSelect: the reading pass, its prompt and parse, group rounds, the seeded fallback, a second model."""

from __future__ import annotations

import random

import pytest
from reading_helpers import (
    ANSWERS,
    candidate_text,
    is_reading,
    labelled,
    prompt_of,
    prompt_tokens,
    run_reading,
    shown_order,
)
from strategy_helpers import SYNC

from paragen.backends.scripted import ScriptedBackend
from paragen.errors import ConfigError
from paragen.types import StrategyResult
from strategies._reading import groups_of, last_number, pick, reading_rng
from strategies.genselect import VERDICT, GenSelect, select_prompt


def best_by_answer(prompt: str, order: list[int]) -> str:
    """A reader that names the shown candidate with the largest answer (0-based, as asked)."""
    best = max(range(len(order)), key=lambda j: int(ANSWERS[order[j]]))
    return f"I compared them carefully . Judgment: 0 was wrong . Judgment: {best}"


def seeded_pool(n: int, seed: int = 7) -> tuple[list[int], random.Random]:
    """The candidates' shuffled order and the generator after it, as the strategy draws them."""
    rng = reading_rng("genselect", seed, "p")
    pool = list(range(n))
    rng.shuffle(pool)
    return pool, rng


def test_prompt_parse_and_pick() -> None:
    prompt = select_prompt("{question}|{count}|{last}|{solutions}", "Q?", ["a", "b"])
    assert prompt == "Q?|2|1|--- Solution 0 ---\na\n\n--- Solution 1 ---\nb"
    assert last_number(VERDICT, "Judgment: 1 ... Judgement: 3") == 3  # the last one counts
    assert last_number(VERDICT, "Judgment: **2**") == 2
    assert last_number(VERDICT, "the best is the second") is None
    assert pick(1, 2, random.Random(0)) == (1, True)
    assert pick(2, 2, random.Random(0)) == (random.Random(0).randrange(2), False)  # past the last
    assert groups_of([4, 1, 3, 0, 2], 2) == [[4, 1], [3, 0], [2]]


@pytest.mark.anyio
async def test_one_reading_pass_names_the_best_and_is_counted() -> None:
    result, backend = await run_reading(GenSelect(n=4), best_by_answer)
    cands, reads = labelled(result, "candidates"), labelled(result, "select")
    assert len(backend.streams) == 2 and not is_reading(backend.streams[0].request)
    assert [t.answer for t in cands] == ANSWERS[:4] and [t.kind for t in cands] == ["sample"] * 4
    assert len(reads) == 1 and reads[0].label == "select0" and reads[0].kind == "sample"
    pool, _ = seeded_pool(4)
    prompt = prompt_of(backend.streams[1].request)
    assert shown_order(prompt) == pool and reads[0].meta["read"] == pool
    assert all(candidate_text(i) in prompt for i in range(4)) and "What is 2 + 3?" in prompt
    assert reads[0].parents == [cands[i].id for i in pool]
    assert result.answer == "6" and result.text == candidate_text(3)  # the minority answer, read as best
    assert reads[0].meta["pick"] == 3 and reads[0].meta["parsed"] is True
    assert reads[0].prompt_tokens == prompt_tokens(prompt)
    assert result.usage.total_tokens == 3 + 4 + 5 + 6 + reads[0].completion_tokens
    assert result.usage.sequential_tokens == 6 + reads[0].completion_tokens
    assert result.metrics == {"readable": 4.0, "rounds": 1.0, "reads": 1.0, "unparsable": 0.0, "chosen": 3.0}
    assert backend.streams[1].request.params.temperature == 0.6  # NeMo-Skills' reader temperature
    assert backend.streams[1].request.params.seed == 7 + 1


def _rounds(result: StrategyResult) -> list[list[list[int]]]:
    reads = labelled(result, "select")
    return [sorted(t.meta["read"] for t in reads if t.meta["round"] == r) for r in range(3)]


@pytest.mark.anyio
async def test_groups_meet_round_after_round_until_one_remains() -> None:
    result, backend = await run_reading(GenSelect(n=5, group_size=2), best_by_answer)
    pool, _ = seeded_pool(5)
    first = groups_of(pool, 2)  # two games and one candidate going through unread
    winners = [max(g, key=lambda i: int(ANSWERS[i])) for g in first]
    second = groups_of(winners, 2)
    third = [max(g, key=lambda i: int(ANSWERS[i])) for g in second]
    assert _rounds(result) == [sorted(first[:2]), sorted(second[:1]), [third]]
    reads = labelled(result, "select")
    assert sorted(t.label for t in reads) == ["select0", "select0", "select1", "select2"]
    assert len(backend.streams) == 1 + 4
    cands = labelled(result, "candidates")
    for trace in reads:  # each reading pass's parents are the candidates it read, as shown
        assert trace.parents == [cands[i].id for i in trace.meta["read"]]
    assert result.answer == "7" and result.metrics["rounds"] == 3.0 and result.metrics["reads"] == 4.0
    seeds = sorted(s.request.params.seed or 0 for s in backend.streams[1:])
    assert seeds == [8, 9, 10, 11]  # every reading call its own seed


@pytest.mark.anyio
async def test_an_unparsable_verdict_is_a_seeded_random_pick_and_recorded() -> None:
    result, _ = await run_reading(GenSelect(n=4), lambda prompt, order: "they all look fine to me")
    pool, rng = seeded_pool(4)
    expected = pool[random.Random(rng.getrandbits(32)).randrange(4)]
    (read,) = labelled(result, "select")
    assert read.meta["parsed"] is False and read.meta["pick"] == expected
    assert result.answer == ANSWERS[expected] and result.metrics["unparsable"] == 1.0
    again, _ = await run_reading(GenSelect(n=4), lambda prompt, order: "no verdict")
    assert again.answer == result.answer  # the same seed draws the same pick


@pytest.mark.anyio
async def test_out_of_range_index_falls_back_too() -> None:
    result, _ = await run_reading(GenSelect(n=3), lambda prompt, order: "Judgment: 3")
    assert result.metrics["unparsable"] == 1.0 and labelled(result, "select")[0].meta["parsed"] is False


@pytest.mark.anyio
async def test_the_reading_pass_runs_on_a_second_model() -> None:
    judge = ScriptedBackend(
        lambda request, index: best_by_answer("", shown_order(prompt_of(request))), capabilities=SYNC
    )
    result, backend = await run_reading(GenSelect(n=4, reader="judge"), lambda p, o: "unused", judge=judge)
    assert len(backend.streams) == 1 and len(judge.streams) == 1  # candidates here, the reading there
    (read,) = labelled(result, "select")
    assert result.answer == "6" and read.meta["parsed"] is True
    assert result.usage.total_tokens == 18 + read.completion_tokens and result.usage.num_samples == 5
    with pytest.raises(ConfigError, match="judge"):
        await run_reading(GenSelect(n=4, reader="judge"), best_by_answer)  # no such backend given


@pytest.mark.anyio
async def test_empty_candidates_are_not_read_and_one_left_needs_no_reading() -> None:
    texts = ["", candidate_text(1), ""]
    result, backend = await run_reading(GenSelect(n=3), best_by_answer, texts=texts)
    assert len(backend.streams) == 1 and result.answer == "5"
    assert result.metrics == {"readable": 1.0, "rounds": 0.0, "reads": 0.0, "unparsable": 0.0, "chosen": 1.0}
