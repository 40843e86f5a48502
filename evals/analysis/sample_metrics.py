"""Per-sample metrics as reasoning evals report them: pass@1[avg-of-k], majority@k, pass@k, no answer.

Definitions (those of NeMo-Skills and sgl-eval, which the "sober reasoning" study also uses):

- k: the samples per problem, the fewest any problem of the setting has (a setting run under
  several seeds pools its samples per problem, seed after seed).
- pass@1[avg-of-k]: the mean correctness of the first k samples of every problem. Its spread
  is measured across the k "runs" (run j = the j-th sample of every problem): the sample
  standard deviation of the k run accuracies, and the standard error std / sqrt(k). With
  k = 1 there is no spread (None). The 95% interval beside it is the percentile bootstrap
  over problems of the per-problem mean (the fixed seed of :data:`evals.analysis.metrics.CI_SEED`).
- majority@k: whether the vote over the first k samples is right (paragen's live vote: no
  answer ignored, ties to the answer seen first), averaged over problems.
- pass@k: the unbiased estimator 1 - C(n-c, k) / C(n, k) of Chen et al. (2021) per problem
  (n samples, c correct), averaged over problems; given for several k up to the fewest n.
- no answer: the share of all samples whose text holds no extractable answer (a limit on
  max tokens that is too low shows here first).
- reasoning tokens: the mean per sample, over the samples whose backend reported them
  (None when none did).

Everything here takes plain values and is unit-tested on hand-computed cases.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from evals.analysis.metrics import bootstrap_ci, pass_at_k
from paragen.answers import majority_vote


@dataclass(frozen=True, slots=True)
class ProblemSamples:
    """One problem's samples in the order a live vote saw them: correct or not, and the answer."""

    correct: Sequence[bool]
    answers: Sequence[str | None]
    reasoning_tokens: Sequence[int] = field(default_factory=tuple)  # samples that reported them

    def majority_correct(self, k: int) -> bool:
        """Whether the vote over the first ``k`` samples picks a right answer."""
        winner = majority_vote(list(self.answers[:k]))
        return winner is not None and self.correct[list(self.answers).index(winner)]


@dataclass(frozen=True, slots=True)
class SampleSummary:
    problems: int
    k: int
    samples: int
    pass1: float
    pass1_std: float | None  # across the k runs
    pass1_sem: float | None
    pass1_ci_low: float
    pass1_ci_high: float
    majority: float  # majority@k
    majority_ci_low: float
    majority_ci_high: float
    pass_at: dict[int, float]  # unbiased pass@j for each j listed
    no_answer: float
    reasoning_tokens: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def ks_up_to(k: int) -> list[int]:
    """The j of the pass@j columns: every j up to 16, then powers of two, and k itself."""
    if k <= 16:
        return list(range(1, k + 1))
    return sorted({*(2**i for i in range(k.bit_length()) if 2**i <= k), k})


def run_accuracies(problems: Sequence[ProblemSamples], k: int) -> list[float]:
    """The accuracy of each of the k runs (run j: the j-th sample of every problem)."""
    return [sum(p.correct[j] for p in problems) / len(problems) for j in range(k)]


def summarize_samples(problems: Sequence[ProblemSamples]) -> SampleSummary | None:
    """The summary of one setting's samples; None when some problem has no sample."""
    if not problems or any(not p.correct for p in problems):
        return None
    k = min(len(p.correct) for p in problems)
    runs = run_accuracies(problems, k)
    std = statistics.stdev(runs) if k > 1 else None
    per_problem = [sum(p.correct[:k]) / k for p in problems]
    majority = [float(p.majority_correct(k)) for p in problems]
    pass_at = {
        j: _mean([pass_at_k(len(p.correct), sum(p.correct), j) for p in problems]) for j in ks_up_to(k)
    }
    answers = [a for p in problems for a in p.answers]
    reasoning = [t for p in problems for t in p.reasoning_tokens]
    (pass1_low, pass1_high), (majority_low, majority_high) = bootstrap_ci(per_problem), bootstrap_ci(majority)
    return SampleSummary(
        problems=len(problems),
        k=k,
        samples=len(answers),
        pass1=_mean(runs),
        pass1_std=std,
        pass1_sem=None if std is None else std / math.sqrt(k),
        pass1_ci_low=pass1_low,
        pass1_ci_high=pass1_high,
        majority=_mean(majority),
        majority_ci_low=majority_low,
        majority_ci_high=majority_high,
        pass_at=pass_at,
        no_answer=sum(a is None for a in answers) / len(answers),
        reasoning_tokens=_mean([float(t) for t in reasoning]) if reasoning else None,
    )


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan
