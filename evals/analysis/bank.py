"""The sample bank: offline aggregations re-scored from one recorded n=N run, without regeneration.

From the raw samples of each record this computes majority@k (the exact expectation
over all k-subsets, see :func:`evals.analysis.metrics.expected_maj_at_k`), best-of-n under any
scorer, DeepConf-offline (confidence-filtered, confidence-weighted voting), CISC with the
sequence-probability confidence, self-certainty best-of-n and Borda voting, and weighted
best-of-k from a verifier's recorded scores (:mod:`evals.analysis.bank_weighted`); the report's
rows of all of them are :func:`evals.analysis.bank_rows.offline_rows`.

Samples are taken in the order they finished, which is the order a live vote sees them,
and voted on with the live tie rule (NO_ANSWER ignored, ties to the first seen): so
maj@n of a finished majority run is exactly its live result. The rows are still labelled
"offline estimate": for other strategies, or runs cut short, the live run differs,
because cancellations and early stops change what gets generated.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from evals.analysis.metrics import expected_maj_at_k
from paragen.answers import extract_answer
from paragen.scoring import TraceRanker
from paragen.types import Trace
from strategies import certainty, confidence
from strategies.self_certainty import SelectionMode

if TYPE_CHECKING:
    from evals.run.records import EvalRecord

OFFLINE = "offline estimate"


@dataclass(frozen=True, slots=True)
class BankProblem:
    """One problem's finished samples with their answers, graded once per distinct answer."""

    problem_id: str
    gold: str | None
    traces: list[Trace]
    answers: list[str | None]


def finish_order(trace: Trace) -> tuple[float, int]:
    """When a sample finished: the order in which a live vote received it."""
    return (math.inf if trace.end is None else trace.end, trace.id)


def bank_from_record(record: EvalRecord) -> BankProblem:
    """The finished ("ok") samples of a record, in the order they finished, with their answers."""
    samples = sorted(
        (t for t in record.result.traces if t.kind == "sample" and t.status == "ok"), key=finish_order
    )
    mode = record.grading_mode
    answers = [t.answer if t.answer is not None else extract_answer(t.text, mode) for t in samples]
    return BankProblem(record.problem.id, record.problem.gold, samples, answers)


def pairs_to_grade(bank: Sequence[BankProblem]) -> list[tuple[str, str]]:
    """The distinct (answer, gold) pairs the bank needs verdicts for.

    Answers are graded as written, not by their voting key: the live vote's winner is
    graded as written, and two spellings with one key ("1,000", "1000") could grade apart.
    """
    seen: dict[tuple[str, str], None] = {}
    for item in bank:
        if item.gold is None:
            continue
        for answer in item.answers:
            if answer is not None:
                seen.setdefault((answer, item.gold), None)
    return list(seen)


Verdicts = dict[tuple[str, str], bool]
"""(answer as written, gold) -> correct."""


def verdict_table(pairs: Sequence[tuple[str, str]], verdicts: Sequence[str]) -> Verdicts:
    return {pair: v == "correct" for pair, v in zip(pairs, verdicts, strict=True)}


def _is_correct(item: BankProblem, answer: str | None, verdicts: Verdicts) -> bool:
    return answer is not None and item.gold is not None and verdicts.get((answer, item.gold), False)


is_correct = _is_correct
"""Whether ``answer`` is right for ``item`` (by the verdicts graded once per distinct answer)."""


def expected_majority(item: BankProblem, k: int, verdicts: Verdicts) -> float:
    """The exact chance that the vote over a random k-subset of the samples is correct.

    ``k`` at or above the number of samples votes over all of them, as the live vote does.
    """
    return float(expected_maj_at_k(item.answers, lambda a: _is_correct(item, a, verdicts), k))


def majority_ks(n: int) -> list[int]:
    """The k of the maj@k rows: every k up to 16, then powers of two and n (exact counting costs ~k^3)."""
    if n <= 16:
        return list(range(1, n + 1))
    return sorted({*(2**i for i in range(n.bit_length()) if 2**i <= n), n})


def best_of(item: BankProblem, ranker: TraceRanker, verdicts: Verdicts) -> bool:
    """Whether the highest-ranked sample (first on ties) that has an answer is correct."""
    scored = [(ranker(t), -i, a) for i, (t, a) in enumerate(zip(item.traces, item.answers, strict=True)) if a]
    return bool(scored) and _is_correct(item, max(scored)[2], verdicts)


def token_confidences(trace: Trace) -> list[float]:
    """Per-token confidence of a recorded sample, higher = surer (``strategies._confidence``)."""
    return confidence.token_confidences(trace.logprobs, trace.top_logprobs)


def lowest_group_confidence(confidences: Sequence[float], window: int = 256) -> float:
    """The lowest mean confidence over sliding windows (DeepConf's "lowest group confidence")."""
    return confidence.trace_score(confidences, window, "lowest_group")


def deepconf_offline(item: BankProblem, verdicts: Verdicts, *, keep: float = 0.9, window: int = 256) -> bool:
    """Keep the most confident ``keep`` fraction of samples, then vote weighted by confidence.

    The same function as the live ``deepconf`` strategy (``confident_vote``, eta = 100 * keep).
    """
    scores = [confidence.trace_confidence(t.logprobs, t.top_logprobs, window) for t in item.traces]
    if not scores:
        return False
    winner, _ = confidence.confident_vote(item.answers, scores, 100 * keep)
    return _is_correct(item, winner, verdicts)


def cisc_offline(item: BankProblem, verdicts: Verdicts, *, temperature: float = 0.2) -> bool:
    """CISC with the sequence-probability confidence: the live ``cisc`` strategy's vote
    (``cisc_vote``) over softmax(exp(mean log p) / T).

    The ``p_true`` and ``verbal`` confidences come from an extra call per path, which a recorded
    run of another strategy does not hold: they cannot be re-scored offline.
    """
    confidences = [
        certainty.sequence_probability(t.logprobs) if a is not None else None
        for t, a in zip(item.traces, item.answers, strict=True)
    ]
    winner, _, _ = certainty.cisc_vote(item.answers, confidences, temperature)
    return _is_correct(item, winner, verdicts)


def self_certainty_offline(
    item: BankProblem,
    verdicts: Verdicts,
    *,
    mode: SelectionMode = "borda",
    power: float = 0.5,
    vocab_size: int = 49152,
) -> bool:
    """Self-certainty best-of-N (``mode="best_of_n"``) or Borda vote, as the live ``self_certainty``
    strategy scores: the recorded top-k log-probabilities, the rest of the mass spread evenly over
    the other V - k tokens (``strategies._certainty.token_self_certainty``)."""
    scores = [certainty.self_certainty(t.logprobs, t.top_logprobs, vocab_size) for t in item.traces]
    ranked = [float("-inf") if s is None else s for s in scores]
    if mode == "borda":
        winner, _ = certainty.borda_vote(item.answers, ranked, power)
        return _is_correct(item, winner, verdicts)
    best = certainty.best_scored(item.answers, ranked)
    return best is not None and _is_correct(item, item.answers[best], verdicts)


SUBSET_DRAWS = 256
"""Above this many k-subsets of a problem's samples, that many are drawn (seeded) instead of all."""


def expected_over_subsets(item: BankProblem, k: int, decide: Callable[[BankProblem], bool]) -> float:
    """The chance that ``decide`` over a random k-subset of the samples (kept in finish order) is
    correct: exact over every subset up to SUBSET_DRAWS of them, else the mean over that many drawn
    with a fixed seed. ``k`` at or above the number of samples decides over all of them."""
    m = len(item.traces)
    if k >= m:
        return float(decide(item))
    if math.comb(m, k) <= SUBSET_DRAWS:
        subsets: Iterable[Sequence[int]] = itertools.combinations(range(m), k)
    else:
        rng = random.Random(f"{item.problem_id}:{k}")
        subsets = (sorted(rng.sample(range(m), k)) for _ in range(SUBSET_DRAWS))
    outcomes = [decide(_subset(item, chosen)) for chosen in subsets]
    return sum(outcomes) / len(outcomes)


def _subset(item: BankProblem, chosen: Sequence[int]) -> BankProblem:
    traces = [item.traces[i] for i in chosen]
    return BankProblem(item.problem_id, item.gold, traces, [item.answers[i] for i in chosen])


__all__ = [
    "OFFLINE",
    "BankProblem",
    "bank_from_record",
    "cisc_offline",
    "deepconf_offline",
    "expected_over_subsets",
    "self_certainty_offline",
]
