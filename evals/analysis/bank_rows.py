"""The sample bank's rows for the report: every offline estimate of one strategy's recorded samples.

maj@k, best-of-n by mean logprob, DeepConf-offline, CISC and self-certainty come from
:mod:`evals.analysis.bank`, weighted best-of-k from :mod:`evals.analysis.bank_weighted`; each row
is labelled an offline estimate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from evals.analysis.bank import (
    OFFLINE,
    BankProblem,
    Verdicts,
    best_of,
    cisc_offline,
    deepconf_offline,
    expected_majority,
    expected_over_subsets,
    majority_ks,
    self_certainty_offline,
)
from evals.analysis.bank_weighted import expected_weighted, has_scores, weighted_methods
from evals.analysis.metrics import bootstrap_ci
from paragen.scoring import mean_logprob


def offline_rows(
    bank: Sequence[BankProblem],
    verdicts: Verdicts,
    *,
    source: str,
    n: int | None = None,
    strategy: str | None = None,
) -> list[dict[str, Any]]:
    """maj@k for k <= n, best-of-n by mean logprob and DeepConf-offline, all labelled offline,
    and weighted best-of-k where ``strategy`` scored whole solutions.

    ``n`` is the strategy's n (default: the most samples any problem finished); a problem
    with fewer finished samples votes over all it has at any larger k.
    """
    n = n if n is not None else max((len(b.answers) for b in bank), default=0)
    rows = []
    for k in majority_ks(n):
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
        rows.extend(_certainty_rows(bank, verdicts, source, n))
    if n >= 2 and has_scores(bank, strategy):
        for method, k, how in weighted_methods(n):
            scores = [expected_weighted(b, k, how, verdicts) for b in bank]
            rows.append(_row(source, method, k, scores))
    return rows


def _certainty_rows(
    bank: Sequence[BankProblem], verdicts: Verdicts, source: str, n: int
) -> list[dict[str, Any]]:
    """CISC (sequence probability, T = 0.2) and self-certainty (best-of-k, Borda p = 0.5) at
    k = 2, 4, 8, ... and n, each the expectation over k-subsets of the recorded samples.

    Self-certainty's KL is estimated from the recorded top-k log-probabilities (the rest of the
    mass spread evenly): the row names say so.
    """
    methods: list[tuple[str, Callable[[BankProblem], bool]]] = [
        ("cisc@{k}(sequence_probability,T=0.2)", lambda b: cisc_offline(b, verdicts)),
        (
            "self_certainty_best_of_{k}(top-k approx)",
            lambda b: self_certainty_offline(b, verdicts, mode="best_of_n"),
        ),
        (
            "self_certainty_borda@{k}(p=0.5,top-k approx)",
            lambda b: self_certainty_offline(b, verdicts, mode="borda"),
        ),
    ]
    ks = [k for k in majority_ks(n) if k >= 2 and (k & (k - 1) == 0 or k == n)]
    return [
        _row(source, name.format(k=k), k, [expected_over_subsets(b, k, decide) for b in bank])
        for name, decide in methods
        for k in ks
    ]


def _row(source: str, method: str, k: int, scores: Sequence[float]) -> dict[str, Any]:
    low, high = bootstrap_ci(scores)
    return {"source": source, "method": method, "k": k, "accuracy": accuracy_of(scores), "ci_low": low,
            "ci_high": high, "num_problems": len(scores), "label": OFFLINE}  # fmt: skip


def accuracy_of(scores: Sequence[float]) -> float:
    return sum(scores) / len(scores) if scores else 0.0
