"""Matched budgets: the accuracy each method reaches within a token or latency budget.

Read from the sample bank of runs that let all their samples finish (majority, best-of-n:
a setting whose records finished at least 90% of their n samples). For every k <= n, a
k-sample run is replayed on k-subsets of a problem's finished samples: every subset when
there are at most ``MAX_SUBSETS`` of them, else that many drawn with a fixed seed. Costs
per subset:

- **majority@k, pass@k** (and DeepConf-offline at k = n): all k samples run to the end;
  tokens = the sum of their completion tokens, latency = the latest of their finish times
  (measured from the record's first sample start). Accuracy: maj@k exactly over all
  subsets (:func:`evals.analysis.metrics.expected_maj_at_k`), pass@k the unbiased estimator (an
  oracle picks a correct sample if there is one: an upper bound, not a strategy).
- **FFS@k**: the samples finish in order of their length (one decode batch: one token per
  step each); the first to finish with an answer wins and the rest are cancelled at that
  step, so tokens = the sum over the k samples of min(own length, winner's length) and
  latency = the winner's finish time.
- **FFS-3@k** (k >= 3): the same, stopping at the third finisher with an answer and voting
  over the three (the live ``ffs_k`` default).

Live settings are read as recorded: the best live accuracy of each strategy whose mean
cost per problem fits the budget.

Budgets are inclusive on both axes, at the precision the report shows them (whole tokens,
hundredths of a second): a setting fits a budget equal to its own mean cost, also when that
budget is one of the default levels (the live costs, rounded).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from evals.analysis import bank as sample_bank
from evals.analysis.bank import BankProblem, Verdicts
from evals.analysis.metrics import k_subsets, pass_at_k
from paragen.answers import majority_vote

MAX_SUBSETS = 2000
SUBSET_SEED = 20240603
AXES = {"total_tokens": "tokens", "latency_s": "latency"}
DIGITS = {"total_tokens": 0, "latency_s": 2}  # the precision a budget is shown (and compared) at


def fits(cost: float, budget: float, axis: str) -> bool:
    """Whether ``cost`` is within ``budget`` (inclusive), both read at the axis's shown precision."""
    digits = DIGITS[axis]
    return round(cost, digits) <= round(budget, digits) + 1e-9


def _sample_costs(item: BankProblem) -> tuple[list[int], list[float]]:
    start = min((t.start for t in item.traces), default=0.0)
    lengths = [t.completion_tokens for t in item.traces]
    times = [(t.end if t.end is not None else t.start) - start for t in item.traces]
    return lengths, times


def _ffs(item: BankProblem, order: Sequence[int], lengths: Sequence[int], times: Sequence[float],
         verdicts: Verdicts, voters: int) -> tuple[bool, float, float]:  # fmt: skip
    """One FFS-``voters`` replay on the samples ``order`` (sorted by finish): (correct, tokens, latency)."""
    answered = [i for i in order if item.answers[i] is not None][:voters]
    stop = answered[voters - 1] if len(answered) >= voters else order[-1]
    winner = majority_vote([item.answers[i] for i in answered]) if answered else None
    correct = sample_bank.is_correct(item, winner, verdicts)
    tokens = sum(min(lengths[i], lengths[stop]) for i in order)
    return correct, float(tokens), times[stop]


def _finish_ranks(lengths: Sequence[int], times: Sequence[float]) -> list[int]:
    """Each sample's place in the order one decode batch finishes them: by length, then finish time."""
    ranks = [0] * len(lengths)
    for place, i in enumerate(sorted(range(len(lengths)), key=lambda i: (lengths[i], times[i]))):
        ranks[i] = place
    return ranks


def problem_curve(item: BankProblem, k: int, verdicts: Verdicts) -> dict[str, tuple[float, float, float]]:
    """Per method at k: (expected accuracy, expected tokens, expected latency) on one problem."""
    lengths, times = _sample_costs(item)
    n = len(item.traces)
    sums: dict[str, list[float]] = {"all": [0.0, 0.0], "ffs": [0.0, 0.0, 0.0], "ffs3": [0.0, 0.0, 0.0]}
    finish_rank = _finish_ranks(lengths, times)
    count = 0
    for chosen in k_subsets(n, k, most=MAX_SUBSETS, seed=SUBSET_SEED):
        count += 1
        sums["all"][0] += sum(map(lengths.__getitem__, chosen))
        sums["all"][1] += max(map(times.__getitem__, chosen))
        order = sorted(chosen, key=finish_rank.__getitem__)  # one sort serves both replays
        for name, voters in (("ffs", 1), ("ffs3", 3)):
            if voters <= k:
                ok, tok, lat = _ffs(item, order, lengths, times, verdicts, voters)
                sums[name][0] += ok
                sums[name][1] += tok
                sums[name][2] += lat
    tok_all, lat_all = sums["all"][0] / count, sums["all"][1] / count
    c = sum(sample_bank.is_correct(item, a, verdicts) for a in item.answers)
    out = {
        "majority": (sample_bank.expected_majority(item, k, verdicts), tok_all, lat_all),
        "pass@k (oracle)": (pass_at_k(n, c, k), tok_all, lat_all),
        "ffs": (sums["ffs"][0] / count, sums["ffs"][1] / count, sums["ffs"][2] / count),
    }
    if k >= 3:
        out["ffs_k (k=3)"] = (sums["ffs3"][0] / count, sums["ffs3"][1] / count, sums["ffs3"][2] / count)
    if k == n and all(t.logprobs for t in item.traces):
        out["deepconf (keep=0.9)"] = (float(sample_bank.deepconf_offline(item, verdicts)), tok_all, lat_all)
    return out


def bank_curve(task: str, source: str, items: Sequence[BankProblem], n: int,
               verdicts: Verdicts) -> list[dict[str, Any]]:  # fmt: skip
    """Points (method, k, accuracy, tokens, latency) averaged over the problems of one setting."""
    points = []
    usable = [b for b in items if len(b.traces) >= 1]
    for k in sample_bank.majority_ks(n):
        per_problem = [problem_curve(b, min(k, len(b.traces)), verdicts) for b in usable]
        for method in per_problem[0] if per_problem else {}:
            values = [p[method] for p in per_problem if method in p]
            if len(values) < len(per_problem):
                continue
            acc, tok, lat = (sum(v[i] for v in values) / len(values) for i in range(3))
            points.append({"task": task, "source": source, "method": method, "k": k,
                           "accuracy": acc, "total_tokens": tok, "latency_s": lat})  # fmt: skip
    return points


def usable_for_budgets(items: Sequence[BankProblem], n: int) -> bool:
    """A setting that let (nearly) all its samples finish: FFS-like settings cancel most of theirs."""
    if n < 2 or not items:
        return False
    return sum(len(b.traces) for b in items) >= 0.9 * n * len(items)


def default_budgets(values: Sequence[float], most: int = 5) -> list[float]:
    """A few budget levels: the distinct costs of the live settings, thinned evenly to ``most``."""
    levels = sorted({round(v, 2) for v in values if not math.isnan(v)})  # `fits` compares at this precision
    if len(levels) <= most:
        return levels
    step = (len(levels) - 1) / (most - 1)
    return [levels[round(i * step)] for i in range(most)]


def within(points: Sequence[dict[str, Any]], live: Sequence[dict[str, Any]], axis: str,
           budgets: Sequence[float]) -> list[dict[str, Any]]:  # fmt: skip
    """Per task and budget: the best accuracy of each method (bank) and live strategy that fits."""
    candidates = [
        (p["task"], f"{p['method']} (bank of {p['source']})", p[axis], p["accuracy"]) for p in points
    ]
    live_axis = "latency_mean" if axis == "latency_s" else axis
    candidates += [(r["task"], _live_name(r), r[live_axis], r["accuracy"]) for r in live]
    rows = []
    for task in dict.fromkeys(c[0] for c in candidates):
        names = list(dict.fromkeys(c[1] for c in candidates if c[0] == task))
        for budget in budgets:
            row: dict[str, Any] = {"task": task, "axis": AXES[axis], "budget": budget}
            for name in names:
                scores = [
                    c[3] for c in candidates if c[0] == task and c[1] == name and fits(c[2], budget, axis)
                ]
                row[name] = max(scores) if scores else None
            rows.append(row)
    return rows


def _live_name(row: dict[str, Any]) -> str:
    return f"live {row['strategy']}" + (f" @{row['folder']}" if row.get("folder") else "")
