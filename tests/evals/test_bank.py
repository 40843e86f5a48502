"""The sample bank: offline estimates from recorded samples, with hand-checked answers."""

from __future__ import annotations

from typing import Any

from evals.bank import (
    OFFLINE,
    bank_from_record,
    best_of,
    deepconf_offline,
    expected_majority,
    lowest_group_confidence,
    mean_logprob,
    offline_rows,
    pairs_to_grade,
    verdict_table,
)
from paragen.types import Trace


def _record(answers: list[str], logprobs: list[float], gold: str = "7") -> dict[str, Any]:
    traces = [
        Trace(
            id=i, text=f"so \\boxed{{{a}}}", start=0.0, end=1.0, logprobs=[lp] * 4, finish_reason="stop"
        ).model_dump()
        for i, (a, lp) in enumerate(zip(answers, logprobs, strict=True))
    ]
    traces.append(Trace(id=99, status="cancelled", text="\\boxed{7}", start=0.0, end=0.5).model_dump())
    return {"problem": {"id": "p", "gold": gold}, "grading_mode": "boxed", "result": {"traces": traces}}


def _verdicts(bank: list[Any]) -> dict[tuple[str, str], bool]:
    pairs = pairs_to_grade(bank)
    return verdict_table(pairs, ["correct" if a == g else "incorrect" for a, g in pairs])


def test_bank_keeps_only_finished_samples() -> None:
    item = bank_from_record(_record(["7", "3", "3"], [-0.1, -2.0, -2.0]))
    assert item.answers == ["7", "3", "3"]  # the cancelled sample's answer is not a sample of the bank


def test_majority_at_every_k() -> None:
    item = bank_from_record(_record(["7", "3", "3"], [-0.1, -2.0, -2.0]))
    verdicts = _verdicts([item])
    assert abs(expected_majority(item, 1, verdicts) - 1 / 3) < 0.15  # 64 random draws of one sample
    assert expected_majority(item, 3, verdicts) == 0.0
    assert expected_majority(item, 2, verdicts) == expected_majority(item, 2, verdicts)  # fixed seed


def test_best_of_and_deepconf_use_confidence() -> None:
    item = bank_from_record(_record(["7", "3", "3"], [-0.1, -2.0, -2.0]))
    verdicts = _verdicts([item])
    assert best_of(item, mean_logprob, verdicts)
    assert lowest_group_confidence([1.0, 5.0, 1.0, 1.0], window=2) == 1.0
    # plain majority says "3"; the one confident sample outweighs the two unsure ones
    assert expected_majority(item, 3, verdicts) == 0.0
    assert deepconf_offline(item, verdicts, keep=1.0)
    assert deepconf_offline(item, verdicts, keep=0.34)
    unsure_first = bank_from_record(_record(["7", "3", "3"], [-3.0, -0.1, -0.1]))
    assert not deepconf_offline(unsure_first, verdicts, keep=1.0)


def test_offline_rows_are_labelled() -> None:
    items = [bank_from_record(_record(["7", "7", "3"], [-0.1, -0.2, -2.0])) for _ in range(3)]
    rows = offline_rows(items, _verdicts(items), source="vote n=3")
    assert [r["method"] for r in rows][:3] == ["maj@1", "maj@2", "maj@3"]
    assert all(r["label"] == OFFLINE for r in rows)
    assert rows[2]["accuracy"] == 1.0


def test_confidence_rows_need_logprobs() -> None:
    with_lp = bank_from_record(_record(["7", "3", "3"], [-0.1, -2.0, -2.0]))
    record = _record(["7", "3", "3"], [-0.1, -2.0, -2.0])
    for trace in record["result"]["traces"]:
        trace["logprobs"] = None
    without_lp = bank_from_record(record)
    methods = [r["method"] for r in offline_rows([with_lp], _verdicts([with_lp]), source="s")]
    assert "best_of_3(mean_logprob)" in methods and "deepconf_offline(keep=0.9)" in methods
    methods = [r["method"] for r in offline_rows([without_lp], _verdicts([without_lp]), source="s")]
    assert methods == ["maj@1", "maj@2", "maj@3"]  # no made-up confidence scores
