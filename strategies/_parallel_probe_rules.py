"""Parallel-Probe's per-round decisions (zhengkid/Parallel-Probe, ``evaluation/method.py``,
``ParallelESTPruningBurstMajorityOnActiveBranches``), free of any sampling.

A round gives every running branch's probe answer (an answer key, or None for a probe that gave
none). :class:`ProbeRules` turns it into a decision: the majority of the branches still voting,
the branches dropped this round, and whether to stop. What it does, as the authors' simulator does:

* Voters are the branches not dropped: running ones with this round's probe answer, finished ones
  with their final answer (for good). None (no answer) is an answer like any other: it may win,
  as the simulator's ``"ERR"`` does.
* The majority is the most frequent answer; a tie goes to the answer whose first voter comes first
  in branch order (``Counter.most_common``).
* From round ``warmup`` on (rounds count from 0) and while more than one branch votes, a running
  branch that disagrees with the majority has its streak raised, one that agrees has it reset to
  0; a streak of ``patience`` drops it. A finished branch is never dropped; during the warmup and
  with a single voter the streaks stand still.
* The stability count rises by one when a round's majority equals the previous round's and is
  reset to 0 otherwise (the first round's never equals "no previous"). ``stable`` stops the run,
  with that majority; the warmup does not delay a stop.
* A run also ends, answering the last majority, once every branch finished or was dropped, and
  after ``max_rounds`` rounds (the simulator's ``max_steps``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

Answer = str | None
StopReason = Literal["stable", "all finished", "round limit"]


@dataclass(frozen=True)
class ProbeParams:
    """The controller's knobs, named as in the paper (and the simulator's names in brackets)."""

    stable: int  # S [T]: repeats of one majority that stop the run
    patience: int  # P [prune_patience]: consecutive disagreements that drop a branch
    warmup: int  # [warm_up]: rounds in which nothing is dropped
    max_rounds: int | None = 100  # [max_steps, ParallelEST's default]


@dataclass(frozen=True)
class RoundDecision:
    round: int
    majority: Answer
    dropped: frozenset[int]
    stop: StopReason | None  # None: go on to the next round


@dataclass
class ProbeRules:
    """The state of one run: who is running, finished or dropped, and the two kinds of streak."""

    params: ProbeParams
    branches: tuple[int, ...]
    round: int = 0
    finished: dict[int, Answer] = field(default_factory=dict)
    dropped: set[int] = field(default_factory=set)
    disagreements: dict[int, int] = field(default_factory=dict)
    repeats: int = 0
    _previous: tuple[Answer] | None = None  # boxed: None is an answer, "no previous" is not

    @property
    def running(self) -> list[int]:
        """The branches to probe next round, in branch order."""
        return [b for b in self.branches if b not in self.finished and b not in self.dropped]

    def finish(self, branch: int, answer: Answer) -> None:
        """A branch ended: from the next round it votes with its final answer and is never dropped."""
        if branch in self.dropped or branch in self.finished:
            return  # a dropped branch's end is its cancellation: it no longer votes
        self.finished[branch] = answer

    def step(self, probes: Mapping[int, Answer]) -> RoundDecision:
        """Decide one round from the running branches' probe answers (exactly those branches)."""
        if set(probes) != set(self.running):
            raise ValueError(f"round {self.round} needs the answers of {self.running}, got {sorted(probes)}")
        votes = self._votes(probes)
        majority = plurality(votes.values())
        dropped = self._drop(probes, majority, voters=len(votes))
        # Dropping only removes disagreeing votes, so the majority stays what it was (see tests).
        self.repeats = self.repeats + 1 if self._previous == (majority,) else 0
        self._previous = (majority,)
        decision = RoundDecision(self.round, majority, frozenset(dropped), self._stop_reason())
        self.round += 1
        return decision

    def _votes(self, probes: Mapping[int, Answer]) -> dict[int, Answer]:
        """Each voter's answer, in branch order (the order ties are broken by)."""
        return {
            b: probes[b] if b in probes else self.finished[b] for b in self.branches if b not in self.dropped
        }

    def _drop(self, probes: Mapping[int, Answer], majority: Answer, *, voters: int) -> set[int]:
        if self.round < self.params.warmup or voters <= 1:
            return set()
        dropped = set()
        for branch, answer in probes.items():
            streak = self.disagreements.get(branch, 0) + 1 if answer != majority else 0
            self.disagreements[branch] = streak
            if streak >= self.params.patience:
                dropped.add(branch)
        self.dropped |= dropped
        return dropped

    def _stop_reason(self) -> StopReason | None:
        if self.repeats >= self.params.stable:
            return "stable"
        if not self.running:
            return "all finished"
        limit = self.params.max_rounds
        return "round limit" if limit is not None and self.round + 1 >= limit else None


def plurality(answers: Iterable[Answer]) -> Answer:
    """The most frequent answer; among equally frequent ones, the first to appear."""
    counts: dict[Answer, int] = {}
    for answer in answers:
        counts[answer] = counts.get(answer, 0) + 1
    best = max(counts.values())
    return next(answer for answer, count in counts.items() if count == best)
