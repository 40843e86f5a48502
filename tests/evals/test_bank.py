"""The sample bank: offline estimates from recorded samples, with hand-checked answers."""

from __future__ import annotations

import random
from fractions import Fraction
from itertools import combinations
from typing import Any

import pytest
from evals_helpers import eval_record

from evals.analysis.bank import (
    OFFLINE,
    BankProblem,
    bank_from_record,
    best_of,
    cisc_offline,
    deepconf_offline,
    expected_majority,
    expected_over_subsets,
    lowest_group_confidence,
    majority_ks,
    pairs_to_grade,
    self_certainty_offline,
    verdict_table,
)
from evals.analysis.bank_rows import offline_rows
from evals.analysis.metrics import expected_maj_at_k
from evals.run.records import EvalRecord
from paragen.answers import majority_vote
from paragen.scoring import mean_logprob
from paragen.types import Trace


def _record(answers: list[str], logprobs: list[float], gold: str = "7") -> EvalRecord:
    traces = [
        Trace(
            id=i, text=f"so \\boxed{{{a}}}", start=0.0, end=1.0 + i, logprobs=[lp] * 4, finish_reason="stop"
        )
        for i, (a, lp) in enumerate(zip(answers, logprobs, strict=True))
    ]
    traces.append(Trace(id=99, status="cancelled", text="\\boxed{7}", start=0.0, end=0.5))
    record = eval_record("p", n=len(answers))
    problem = record.problem.model_copy(update={"gold": gold})
    result = record.result.model_copy(update={"traces": traces})
    return record.model_copy(update={"problem": problem, "result": result, "grading_mode": "boxed"})


def _verdicts(bank: list[Any]) -> dict[tuple[str, str], bool]:
    pairs = pairs_to_grade(bank)
    return verdict_table(pairs, ["correct" if a == g else "incorrect" for a, g in pairs])


def test_bank_keeps_only_finished_samples() -> None:
    item = bank_from_record(_record(["7", "3", "3"], [-0.1, -2.0, -2.0]))
    assert item.answers == ["7", "3", "3"]  # the cancelled sample's answer is not a sample of the bank


def test_majority_at_every_k() -> None:
    item = bank_from_record(_record(["7", "3", "3"], [-0.1, -2.0, -2.0]))
    verdicts = _verdicts([item])
    assert expected_majority(item, 1, verdicts) == 1 / 3  # exact: one sample in three is right
    # pairs: {7,3} twice (7 finished first, so it wins the tie), {3,3} once
    assert expected_majority(item, 2, verdicts) == 2 / 3
    assert expected_majority(item, 3, verdicts) == 0.0


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
    for trace in record.result.traces:
        trace.logprobs = None
    without_lp = bank_from_record(record)
    methods = [r["method"] for r in offline_rows([with_lp], _verdicts([with_lp]), source="s")]
    assert "best_of_3(mean_logprob)" in methods and "deepconf_offline(keep=0.9)" in methods
    methods = [r["method"] for r in offline_rows([without_lp], _verdicts([without_lp]), source="s")]
    assert methods == ["maj@1", "maj@2", "maj@3"]  # no made-up confidence scores


def test_samples_vote_in_the_order_they_finished() -> None:
    record = _record(["3", "7"], [-1.0, -1.0])
    first, second = record.result.traces[:2]
    first.start, first.end, second.start, second.end = 0.0, 5.0, 1.0, 2.0  # started first, finished last
    item = bank_from_record(record)
    assert item.answers == ["7", "3"]
    assert expected_majority(item, 2, _verdicts([item])) == 1.0  # the 1-1 tie goes to the first finished


def test_exact_majority_at_k_equals_counting_every_subset() -> None:
    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(1, 8)
        answers = [rng.choice([None, "1", "2", "2.0", "3", "4"]) for _ in range(n)]
        right = {"2", "4"}  # "2.0" votes with "2" but, as written, grades apart
        for k in range(1, n + 1):
            subsets = list(combinations(answers, k))
            wins = sum(1 for s in subsets if majority_vote(list(s)) in right)
            assert expected_maj_at_k(answers, right.__contains__, k) == Fraction(wins, len(subsets))


def test_majority_ks_are_every_k_then_powers_of_two() -> None:
    assert majority_ks(4) == [1, 2, 3, 4]
    assert majority_ks(24) == [1, 2, 4, 8, 16, 24]


def test_cisc_and_self_certainty_rows_come_with_logprobs() -> None:
    item = bank_from_record(_record(["7", "3", "3"], [-0.1, -2.0, -2.0]))
    verdicts = _verdicts([item])
    # sequence probability exp(-0.1) = 0.905 against exp(-2) = 0.135 twice: at T = 0.2 the 7 weighs
    # exp(4.52) = 92 against 2 exp(0.68) = 3.9; a flat softmax (T = 100) leaves the majority, 3
    assert cisc_offline(item, verdicts) and not cisc_offline(item, verdicts, temperature=100.0)
    # no top-k recorded: each token's own probability is the known mass, the 7's the largest
    assert self_certainty_offline(item, verdicts, mode="best_of_n")
    assert self_certainty_offline(item, verdicts, mode="borda", power=2.0)  # 7: 3^2 = 9 > 3: 2^2 + 1 = 5
    assert not self_certainty_offline(item, verdicts, mode="borda", power=0.5)  # 1.732 < 1.414 + 1
    rows = {r["method"]: r["accuracy"] for r in offline_rows([item], verdicts, source="s")}
    assert rows["cisc@3(sequence_probability,T=0.2)"] == 1.0
    assert rows["self_certainty_best_of_3(top-k approx)"] == 1.0
    assert rows["self_certainty_borda@3(p=0.5,top-k approx)"] == 0.0
    # k = 2: of the pairs {7, 3}, {7, 3}, {3, 3} the first two pick the 7 by every method (Borda:
    # 2^0.5 = 1.414 against 1), the last can only answer 3
    assert rows["cisc@2(sequence_probability,T=0.2)"] == pytest.approx(2 / 3)
    assert rows["self_certainty_best_of_2(top-k approx)"] == pytest.approx(2 / 3)
    assert rows["self_certainty_borda@2(p=0.5,top-k approx)"] == pytest.approx(2 / 3)


def test_subsets_are_all_counted_up_to_the_draw_limit_then_drawn_with_a_fixed_seed() -> None:
    item = bank_from_record(_record([str(i) for i in range(12)], [-1.0] * 12))
    first = item.traces[0]

    def holds_the_first(subset: BankProblem) -> bool:
        ends = [t.end or 0.0 for t in subset.traces]
        assert ends == sorted(ends)  # kept in finish order
        return first in subset.traces

    assert expected_over_subsets(item, 2, holds_the_first) == 11 / 66  # C(12, 2) = 66 <= 256: exact
    drawn = expected_over_subsets(item, 6, holds_the_first)  # C(12, 6) = 924: 256 drawn
    assert drawn == expected_over_subsets(item, 6, holds_the_first) and abs(drawn - 0.5) < 0.1
    assert expected_over_subsets(item, 12, holds_the_first) == 1.0
