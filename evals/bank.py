"""The sample bank: offline aggregations re-scored from one recorded n=N run, without regeneration.

From the raw samples of each record this computes majority@k for every k <= n (the
expectation over random k-subsets, fixed seed), best-of-n under any scorer, and
DeepConf-offline (confidence-filtered, confidence-weighted voting). These are labelled
"offline estimate": a live run of the same strategy differs, because cancellations and
early stops change what gets generated.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from evals.metrics import bootstrap_ci
from paragen.answers import answer_key, extract_answer, majority_vote
from paragen.types import Trace
from strategies import confidence

OFFLINE = "offline estimate"
Scorer = Callable[[Trace], float]


@dataclass(frozen=True, slots=True)
class BankProblem:
    """One problem's finished samples with their answers, graded once per distinct answer."""

    problem_id: str
    gold: str | None
    traces: list[Trace]
    answers: list[str | None]


def bank_from_record(record: dict[str, Any]) -> BankProblem:
    """The finished ("ok") samples of a record, in start order, with their extracted answers."""
    mode = record.get("grading_mode", "auto")
    traces = [Trace.model_validate(t) for t in record["result"]["traces"]]
    samples = sorted(
        (t for t in traces if t.kind == "sample" and t.status == "ok"), key=lambda t: (t.start, t.id)
    )
    answers = [t.answer if t.answer is not None else extract_answer(t.text, mode) for t in samples]
    return BankProblem(str(record["problem"]["id"]), record["problem"].get("gold"), samples, answers)


def pairs_to_grade(bank: Sequence[BankProblem]) -> list[tuple[str, str]]:
    """The distinct (answer, gold) pairs the bank needs verdicts for."""
    seen: dict[tuple[str, str], tuple[str, str]] = {}
    for item in bank:
        if item.gold is None:
            continue
        for answer in item.answers:
            if answer is not None:
                seen.setdefault((answer_key(answer), item.gold), (answer, item.gold))
    return list(seen.values())


Verdicts = dict[tuple[str, str], bool]
"""(answer key, gold) -> correct."""


def verdict_table(pairs: Sequence[tuple[str, str]], verdicts: Sequence[str]) -> Verdicts:
    return {(answer_key(a), g): v == "correct" for (a, g), v in zip(pairs, verdicts, strict=True)}


def _is_correct(item: BankProblem, answer: str | None, verdicts: Verdicts) -> bool:
    return (
        answer is not None and item.gold is not None and verdicts.get((answer_key(answer), item.gold), False)
    )


def expected_majority(
    item: BankProblem, k: int, verdicts: Verdicts, *, draws: int = 64, seed: int = 0
) -> float:
    """Chance that the majority of k samples drawn without replacement is correct (exact for k = n)."""
    n = len(item.answers)
    if n == 0:
        return 0.0
    if k >= n:
        return float(_is_correct(item, majority_vote(item.answers), verdicts))
    rng = random.Random(f"{seed}:{item.problem_id}:{k}")
    wins = sum(_is_correct(item, majority_vote(rng.sample(item.answers, k)), verdicts) for _ in range(draws))
    return wins / draws


def best_of(item: BankProblem, scorer: Scorer, verdicts: Verdicts) -> bool:
    """Whether the highest-scoring sample (first on ties) that has an answer is correct."""
    scored = [(scorer(t), -i, a) for i, (t, a) in enumerate(zip(item.traces, item.answers, strict=True)) if a]
    return bool(scored) and _is_correct(item, max(scored)[2], verdicts)


def mean_logprob(trace: Trace) -> float:
    """A scorer: the mean log-probability of the sample's tokens (higher is more confident)."""
    return sum(trace.logprobs) / len(trace.logprobs) if trace.logprobs else float("-inf")


def token_confidences(trace: Trace) -> list[float]:
    """Per-token confidence of a recorded sample, higher = surer (``strategies.confidence``)."""
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


def offline_rows(bank: Sequence[BankProblem], verdicts: Verdicts, *, source: str) -> list[dict[str, Any]]:
    """maj@k for every k <= n, best-of-n by mean logprob and DeepConf-offline, all labelled offline."""
    n = min((len(b.answers) for b in bank), default=0)
    rows = []
    for k in range(1, n + 1):
        scores = [expected_majority(b, k, verdicts) for b in bank]
        rows.append(_row(source, f"maj@{k}", k, scores))
    # Scoring by confidence needs logprobs; without them every score ties and the rows would
    # report a made-up accuracy, so they are left out (run with logprobs to get them).
    if n >= 2 and all(t.logprobs for b in bank for t in b.traces):
        rows.append(
            _row(
                source,
                f"best_of_{n}(mean_logprob)",
                n,
                [float(best_of(b, mean_logprob, verdicts)) for b in bank],
            )
        )
        for keep in (0.9, 0.1):
            scores = [float(deepconf_offline(b, verdicts, keep=keep)) for b in bank]
            rows.append(_row(source, f"deepconf_offline(keep={keep})", n, scores))
    return rows


def _row(source: str, method: str, k: int, scores: Sequence[float]) -> dict[str, Any]:
    low, high = bootstrap_ci(scores)
    return {"source": source, "method": method, "k": k, "accuracy": accuracy_of(scores), "ci_low": low,
            "ci_high": high, "num_problems": len(scores), "label": OFFLINE}  # fmt: skip


def accuracy_of(scores: Sequence[float]) -> float:
    return sum(scores) / len(scores) if scores else 0.0


__all__ = ["OFFLINE", "BankProblem", "bank_from_record", "deepconf_offline", "offline_rows"]
