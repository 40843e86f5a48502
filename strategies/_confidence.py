"""DeepConf's confidence math, in one place: the live strategies and the offline bank both use it.

Token confidence is the negative mean log-probability of the top-k candidates at a position,
the sampled token's included when it is not among them (large = the model was sure); group
confidence is its mean over a sliding window; a trace's score is its lowest group confidence
(or the mean of its bottom 10% of groups, its tail, or its mean). ``confident_vote`` keeps the
answered traces' top eta% by score and votes weighted by score, which is DeepConf-offline;
``strategies.deepconf.DeepConf`` and ``evals.bank.deepconf_offline`` both call it, so
the offline estimate cannot drift from the live strategy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from paragen.answers import majority_vote

ScoreMethod = Literal["lowest_group", "bottom10", "tail", "mean"]


def token_confidences(
    logprobs: Sequence[float] | None,
    top_logprobs: Sequence[Sequence[float]] | None,
    *,
    with_sampled: bool = True,
) -> list[float]:
    """C_i = -mean of the top-k log-probabilities at i; higher means surer.

    A sampled token outside the top k is averaged in too (k + 1 values), as the reference's
    ``compute_confidence`` does: it averages every entry of vLLM's logprobs dict, which holds
    the sampled token besides the top k. A chosen log-probability below the row's lowest marks
    such a token. ``with_sampled=False`` averages the top k alone, as the reference's online
    logits processor does (``ConfPerReqLogitsProcessor.compute_conf``: ``torch.topk``).
    Without top-k alternatives, -log p of the chosen token would run the wrong way (a sure
    token has log p near 0), so the fallback is the chosen token's probability.
    """
    if top_logprobs:
        chosen = list(logprobs or ()) if with_sampled else []
        return [
            _row_confidence(row, chosen[i] if i < len(chosen) else None) for i, row in enumerate(top_logprobs)
        ]
    return [math.exp(lp) for lp in logprobs or ()]


def _row_confidence(row: Sequence[float], chosen: float | None) -> float:
    """Minus the mean of a position's top-k log-probabilities, the sampled token's added when
    it is not among them."""
    if not row:
        return 0.0
    values = [*row, chosen] if chosen is not None and chosen < min(row) else list(row)
    return -sum(values) / len(values)


def group_confidences(conf: Sequence[float], window: int) -> list[float]:
    """Means over every window of ``window`` consecutive tokens (one group if the trace is shorter)."""
    if not conf:
        return []
    if len(conf) <= window:
        return [sum(conf) / len(conf)]
    total = sum(conf[:window])
    groups = [total / window]
    for i in range(window, len(conf)):
        total += conf[i] - conf[i - window]
        groups.append(total / window)
    return groups


def trace_score(conf: Sequence[float], window: int, method: ScoreMethod = "lowest_group") -> float:
    """One confidence per trace, higher is better."""
    groups = group_confidences(conf, window)
    if not groups:
        return 0.0
    if method == "lowest_group":
        return min(groups)
    if method == "bottom10":
        worst = sorted(groups)[: max(1, len(groups) // 10)]
        return sum(worst) / len(worst)
    if method == "tail":
        return group_confidences(conf[-window:], window)[0]
    return sum(conf) / len(conf)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear interpolation, rounded as ``numpy.percentile`` rounds.

    DeepConf's reference takes its thresholds with ``np.percentile``; a score that lands exactly
    on the threshold is kept, so the arithmetic follows numpy's to the last bit (the position
    is ``(n - 1) * (q / 100)``, and the interpolation runs from the nearer end).
    """
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    pos = (len(ordered) - 1) * (q / 100)
    low = math.floor(pos)
    low_value, high_value = ordered[low], ordered[min(low + 1, len(ordered) - 1)]
    gap, weight = high_value - low_value, pos - low
    return high_value - gap * (1 - weight) if weight >= 0.5 else low_value + gap * weight


def keep_top(scores: Sequence[float], eta: float) -> list[int]:
    """Indices of the traces scoring at or above the (100 - eta)th percentile, in input order.

    The reference's filter (deepconf ``filter_top_confidence``): every score equal to the
    threshold is kept, so ties can keep more than eta%, and eta=90 of 16 keeps 14, not
    ceil(14.4) = 15. The percentile is taken at ``(1 - eta / 100) * 100`` as the reference
    writes it (``1 - 0.1`` is 0.9, and ``0.9 * 100`` is 90.00000000000001).
    """
    if not scores:
        return []
    threshold = percentile(scores, (1 - eta / 100) * 100)
    return [i for i, score in enumerate(scores) if score >= threshold]


def trace_confidence(
    logprobs: Sequence[float] | None,
    top_logprobs: Sequence[Sequence[float]] | None,
    window: int,
    method: ScoreMethod = "lowest_group",
) -> float:
    """A finished trace's score from its log-probabilities (0.0 when it has none)."""
    return trace_score(token_confidences(logprobs, top_logprobs), window, method)


def confident_vote(
    answers: Sequence[str | None], scores: Sequence[float], eta: float
) -> tuple[str | None, list[int]]:
    """DeepConf-offline: of the answered traces keep the top ``eta`` percent by score, vote
    weighted by score.

    Traces without an answer are dropped before the filter, as the reference does (its
    ``compute_all_voting_results`` keeps only traces with an extracted answer): a trace looping
    to its length cap has no answer and can be among the most confident, and must not take a
    kept place. Returns the winner (None when no trace has an answer) and the kept indices,
    most confident first. A tie in the vote goes to the answer of the most confident kept
    trace, so the result does not depend on the order the traces came in.
    """
    answered = [i for i, answer in enumerate(answers) if answer is not None]
    kept = [answered[j] for j in keep_top([scores[i] for i in answered], eta)]
    kept.sort(key=lambda i: (-scores[i], i))
    return majority_vote([answers[i] for i in kept], [scores[i] for i in kept]), kept


__all__ = [
    "ScoreMethod",
    "confident_vote",
    "group_confidences",
    "keep_top",
    "percentile",
    "token_confidences",
    "trace_confidence",
    "trace_score",
]
