"""DeepConf offline, live and re-scored from the record, is one computation (strategies._confidence)."""

from __future__ import annotations

import pytest
from strategy_helpers import run, words

from evals.analysis.bank import bank_from_record, deepconf_offline
from evals.run.records import EvalRecord, GradeRecord
from paragen import Problem, SamplingParams
from paragen.answers import answer_key
from paragen.backends.scripted import Script
from strategies._confidence import confident_vote, keep_top
from strategies.deepconf import DeepConf

# The scripted backend gives every token a log-probability that depends only on its position, so a
# trace's confidence depends on its length: here the order of confidence is 1 > 2 > 4 > 3 > 5 > 6
# tokens, and at eta=34 the 66th percentile keeps 2 of 6 (where a ceil would keep 3 and say "5").
LENGTHS_AND_ANSWERS = [(1, "3"), (2, "5"), (4, "5"), (3, "3"), (5, "4"), (6, "4")]


@pytest.mark.anyio
@pytest.mark.parametrize("eta", [10, 34, 50, 90, 100])
async def test_the_bank_reaches_the_live_answer_from_the_recorded_samples(eta: float) -> None:
    scripts = [Script(text=words(k, a)) for k, a in LENGTHS_AND_ANSWERS]
    result, _ = await run(DeepConf(n=len(scripts), eta=eta, window=4), scripts)
    assert result.answer is not None
    record = EvalRecord(
        run_id="r",
        settings_id="s",
        task="t",
        grading_mode="auto",
        problem=Problem(id="p", question="q", gold=result.answer),
        strategy="deepconf",
        n=len(scripts),
        strategy_config={},
        result=result,
        grade=GradeRecord(outcome="correct", correct=True, answer=result.answer, gold=result.answer),
        backend="scripted",
        sampling=SamplingParams(),
        seed=0,
        versions={},
        recorded_at=0.0,
    )
    item = bank_from_record(record)
    # The bank grades each answer as written (the live winner is graded as written too).
    right = {(a, result.answer): answer_key(a) == answer_key(result.answer) for a in item.answers if a}
    assert deepconf_offline(item, right, keep=eta / 100, window=4)
    wrong = {key: not ok for key, ok in right.items()}  # the same vote, graded the other way round
    assert not deepconf_offline(item, wrong, keep=eta / 100, window=4)


def test_ties_go_to_the_most_confident_whatever_the_order() -> None:
    answers, scores = ["a", "b", "b", "a"], [0.9, 0.5, 0.4, 0.0]  # a: 0.9, b: 0.9
    assert confident_vote(answers, scores, 100)[0] == "a"
    assert confident_vote(answers[::-1], scores[::-1], 100)[0] == "a"
    assert confident_vote([None, None], [1.0, 2.0], 100) == (None, [])


def test_keep_top_is_not_fooled_by_float_percentages() -> None:
    assert len(keep_top([float(i) for i in range(10)], 100 * 0.9)) == 9  # 100 * 0.9 == 90.00000000000001
