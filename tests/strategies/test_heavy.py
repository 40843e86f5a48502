"""HeavySkill: K traces, deliberations that read them, overruling, iterations, read_k, the fallback."""

from __future__ import annotations

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
from strategy_helpers import SYNC

from paragen.backends.scripted import ScriptedBackend
from paragen.errors import ConfigError
from strategies.heavy import Heavy, reading_order, thinkers


def rederive(prompt: str, order: list[int]) -> str:
    """A deliberation that reads the attempts and answers 6, the minority's answer."""
    return f"attempts {len(order)} read ; the careful one is right \\boxed{{6}}"


def test_thinkers_and_reading_order() -> None:
    assert thinkers(["a", "b"]) == (
        "===== Thinker #1 =====\na\n===== End of thinker #1 =====\n"
        "===== Thinker #2 =====\nb\n===== End of thinker #2 ====="
    )
    import random

    assert reading_order([0, 1, 2], None, False, random.Random(0)) == [0, 1, 2]
    drawn = reading_order([0, 1, 2, 3], 2, False, random.Random(1))
    assert len(drawn) == 2 and drawn == sorted(drawn)
    with pytest.raises(ConfigError):
        Heavy(reason_k=2, read_k=3)


@pytest.mark.anyio
async def test_deliberations_read_every_trace_and_may_overrule_the_majority() -> None:
    result, backend = await run_reading(Heavy(reason_k=4, summary_k=2), rederive)
    traces, delib = labelled(result, "candidates"), labelled(result, "deliberate")
    assert [t.answer for t in traces] == ANSWERS[:4]  # majority: 5
    assert len(backend.streams) == 1 + 2 and sorted(t.label for t in delib) == ["deliberate0"] * 2
    orders = []
    for stream in backend.streams[1:]:
        prompt = prompt_of(stream.request)
        orders.append(shown_order(prompt))
        assert sorted(shown_order(prompt)) == [0, 1, 2, 3] and "Thinker #4" in prompt
        assert all(candidate_text(i) in prompt for i in range(4)) and "What is 2 + 3?" in prompt
    for trace in delib:
        assert trace.kind == "sample" and sorted(trace.parents) == [t.id for t in traces]
        assert trace.meta["read"] == trace.parents and trace.meta["iteration"] == 0
        assert [traces.index(next(t for t in traces if t.id == p)) for p in trace.parents] in orders
        assert trace.prompt_tokens in {prompt_tokens(prompt_of(s.request)) for s in backend.streams[1:]}
    assert result.answer == "6"
    assert result.metrics == {
        "votes_for_winner": 2.0,
        "distinct_answers": 1.0,
        "fallback": 0.0,
        "overruled": 1.0,
        "deliberations": 2.0,
    }
    assert result.usage.total_tokens == 18 + 2 * delib[0].completion_tokens
    assert result.usage.sequential_tokens == 6 + delib[0].completion_tokens
    assert sorted(s.request.params.seed or 0 for s in backend.streams[1:]) == [8, 9]


@pytest.mark.anyio
async def test_a_second_iteration_reads_the_first_deliberations_too() -> None:
    result, backend = await run_reading(Heavy(reason_k=4, summary_k=2, iterations=2), rederive)
    first, second = labelled(result, "deliberate0"), labelled(result, "deliberate1")
    assert len(first) == 2 and len(second) == 2 and len(backend.streams) == 1 + 4
    expected = sorted([t.id for t in labelled(result, "candidates")] + [t.id for t in first])
    assert all(sorted(t.parents) == expected for t in second)
    for trace in first:  # a deliberation's text is shown to the next iteration
        assert all(trace.text in prompt_of(s.request) for s in backend.streams[-2:])
    assert result.answer == "6" and result.metrics["deliberations"] == 2.0
    assert sorted(s.request.params.seed or 0 for s in backend.streams[1:]) == [8, 9, 10, 11]


@pytest.mark.anyio
async def test_read_k_reads_a_seeded_subset() -> None:
    result, _ = await run_reading(Heavy(reason_k=4, summary_k=3, read_k=2), rederive)
    delib = labelled(result, "deliberate")
    assert [len(t.parents) for t in delib] == [2, 2, 2]
    again, _ = await run_reading(Heavy(reason_k=4, summary_k=3, read_k=2), rederive)
    assert sorted(t.parents for t in labelled(again, "deliberate")) == sorted(t.parents for t in delib)


@pytest.mark.anyio
async def test_no_deliberation_answer_falls_back_to_the_traces_majority() -> None:
    result, _ = await run_reading(Heavy(reason_k=4, summary_k=2), lambda prompt, order: "I cannot decide")
    assert result.answer == "5" and result.metrics["fallback"] == 1.0 and result.metrics["overruled"] == 0.0


@pytest.mark.anyio
async def test_deliberation_on_a_second_model() -> None:
    judge = ScriptedBackend(lambda request, index: rederive("", []), capabilities=SYNC)
    result, backend = await run_reading(Heavy(reason_k=4, summary_k=2, reader="judge"), rederive, judge=judge)
    assert len(backend.streams) == 1 and len(judge.streams) == 2
    assert result.answer == "6" and result.usage.num_samples == 6
