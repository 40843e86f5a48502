"""The math of CISC and of self-certainty, in one place: the live strategies and the offline bank
both use it, so an offline estimate cannot drift from the live strategy.

CISC (Taubenfeld et al., arXiv 2502.06233; google-research ``cisc/``): every answered path with a
confidence gets the weight softmax(c / T) over those paths, and the answer whose weights sum
highest wins. Self-certainty (Kang et al., arXiv 2502.18581; backprop07/Self-Certainty): a
token's self-certainty is KL(U || p) = -log V - (1/V) * sum_j log p_j over the vocabulary; a
response's is the mean over its tokens. Over HTTP, and on paragen's engine, a token carries its
own log-probability and the top k alternatives' (k <= 20), not the whole distribution, so
:func:`token_self_certainty` approximates it: see there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from paragen.answers import majority_vote

# Left to the unknown tokens when the top k already sum to 1 or past it (rounded log-probabilities
# can): without a floor log(0) would make one token's certainty infinite.
REST_FLOOR = 1e-12


def softmax(values: Sequence[float], temperature: float) -> list[float]:
    """softmax(values / temperature), shifted by the maximum first (the reference's ``util.softmax``)."""
    if temperature <= 0:
        raise ValueError("the softmax temperature must be positive")
    if not values:
        return []
    scaled = [v / temperature for v in values]
    top = max(scaled)
    exps = [math.exp(s - top) for s in scaled]
    total = sum(exps)
    return [e / total for e in exps]


def cisc_vote(
    answers: Sequence[str | None], confidences: Sequence[float | None], temperature: float
) -> tuple[str | None, list[int], list[float]]:
    """CISC's weighted vote: the winner, the voting paths' indices and their softmax weights.

    As the reference's ``majority_with_conf`` (SOFTMAX), a path without an answer or without a
    confidence (its extra call failed or did not parse) takes no part, not even in the softmax's
    normaliser. A tie goes to the answer seen first (paths in the order they finished).
    """
    voters = [
        i
        for i, (a, c) in enumerate(zip(answers, confidences, strict=True))
        if a is not None and c is not None
    ]
    weights = softmax([float(confidences[i] or 0.0) for i in voters], temperature)
    return majority_vote([answers[i] for i in voters], weights), voters, weights


def sequence_probability(logprobs: Sequence[float] | None) -> float | None:
    """exp(mean token log-probability): the reference's ``get_normalized_probability_for_sequence``."""
    if not logprobs:
        return None
    return math.exp(sum(logprobs) / len(logprobs))


def p_true(token: str, logprob: float | None) -> float | None:
    """P("1") from the one greedy token answering "0 or 1": its probability when it is "1", one
    minus it when "0" (the reference normalises p("1") over p("0") + p("1"); without the other
    option's probability, the rest of the mass is taken to be the other option's)."""
    word = token.strip()
    if logprob is None or word not in ("0", "1"):
        return None
    p = math.exp(logprob)
    return p if word == "1" else 1.0 - p


def parse_verbal(text: str, top: float = 100.0) -> float:
    """A verbalised 0-``top`` confidence as the reference reads one: the text up to ")", letters,
    digits, "." and "-" kept, read as a number; unreadable or out of range is 0."""
    kept = "".join(c for c in text.split(")")[0] if c.isalnum() or c in ".-")
    try:
        value = float(kept)
    except ValueError:
        return 0.0
    return value if 0.0 <= value <= top else 0.0  # NaN fails both comparisons: 0


def exact_self_certainty(logprobs: Sequence[float]) -> float:
    """KL(U || p) of one full next-token distribution: -log V - (1/V) * sum_j log p_j."""
    size = len(logprobs)
    return -math.log(size) - sum(logprobs) / size


def token_self_certainty(row: Sequence[float], chosen: float | None, vocab_size: int) -> float:
    """KL(U || p) at one position from the top-k log-probabilities ``row`` and the sampled token's.

    The known tokens are the top k, and the sampled one when it is not among them (its
    log-probability is below the row's lowest, as ``strategies._confidence`` reads it). The mass
    they leave, r = 1 - sum of their p, is spread evenly over the other V - m tokens. For a given
    r, the even spread gives sum log p its largest value (Jensen), so the estimate is a lower
    bound of the exact KL; it is exact when the unknown tokens do share r evenly.
    """
    known = [*row, chosen] if chosen is not None and (not row or chosen < min(row)) else list(row)
    others = vocab_size - len(known)
    if others <= 0:
        return exact_self_certainty(known)
    rest = max(1.0 - sum(math.exp(lp) for lp in known), REST_FLOOR)
    total = sum(known) + others * math.log(rest / others)
    return -math.log(vocab_size) - total / vocab_size


def self_certainty(
    logprobs: Sequence[float] | None, top_logprobs: Sequence[Sequence[float]] | None, vocab_size: int
) -> float | None:
    """A response's self-certainty: the mean of its tokens' (None without log-probabilities)."""
    chosen = list(logprobs or ())
    rows = list(top_logprobs or ()) or [[] for _ in chosen]
    if not rows:
        return None
    values = [
        token_self_certainty(row, chosen[i] if i < len(chosen) else None, vocab_size)
        for i, row in enumerate(rows)
    ]
    return sum(values) / len(values)


def best_scored(answers: Sequence[str | None], scores: Sequence[float]) -> int | None:
    """The index of the highest-scoring answered response, the first on ties (the reference's
    best-of-N sets an unanswered response's score to -1e9 and takes the first maximum)."""
    answered = [i for i, a in enumerate(answers) if a is not None]
    return max(answered, key=lambda i: (scores[i], -i)) if answered else None


def borda_weights(scores: Sequence[float], power: float) -> list[float]:
    """Each response's Borda votes: ranked by score (first first on ties), rank r of N gets
    (N - r + 1) ** power, as the reference's ``voting_from_list`` ranks every response."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    votes = [0.0] * len(scores)
    for rank, index in enumerate(order, start=1):
        votes[index] = float(len(scores) - rank + 1) ** power
    return votes


def borda_vote(
    answers: Sequence[str | None], scores: Sequence[float], power: float
) -> tuple[str | None, list[float]]:
    """The answer whose responses' Borda votes sum highest (ties: the answer seen first) and the votes."""
    votes = borda_weights(scores, power)
    return majority_vote(answers, votes), votes


__all__ = [
    "REST_FLOOR",
    "best_scored",
    "borda_vote",
    "borda_weights",
    "cisc_vote",
    "exact_self_certainty",
    "p_true",
    "parse_verbal",
    "self_certainty",
    "sequence_probability",
    "softmax",
    "token_self_certainty",
]
