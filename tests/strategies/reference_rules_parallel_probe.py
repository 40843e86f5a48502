"""Parallel-Probe's main-table controller as the authors' offline simulator runs it, restated for
differential tests, independently of paragen's code.

Source: zhengkid/Parallel-Probe, ``evaluation/method.py``,
``ParallelESTPruningBurstMajorityOnActiveBranches.execute`` (the "Parallel-Probe" row of
``evaluation/transform_table.py``), over ``evaluation/data_loader.py``'s ``Branch.explore``: a
branch's released probe answers are read one per call, then its final answer (and "finished").
Its structure is kept: branches are dicts, one loop over steps, a ``Counter`` vote.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class SimBranch:
    """``Branch``: one trajectory's probe answers (one per ``probe_freq`` tokens), then its final."""

    probes: Sequence[str]
    final: str
    read: int = 0

    def explore(self) -> tuple[str, bool]:
        if self.read < len(self.probes):
            self.read += 1
            return self.probes[self.read - 1], False
        return self.final, True


@dataclass
class SimOutcome:
    answer: str | None
    last_step: int  # the step the loop returned or broke at (-1: it never ran)
    how: str  # "stable", "finished" (all finished or pruned) or "max_steps"
    pruned_at: dict[int, int] = field(default_factory=dict)


def simulate(
    trajectories: Sequence[tuple[Sequence[str], str]],
    *,
    T: int,
    prune_patience: int,
    warm_up: int,
    max_steps: int = 100,
) -> SimOutcome:
    """``execute`` with ``probe_burst=1`` over ``(probe answers, final answer)`` per branch."""
    sims = [SimBranch(probes, final) for probes, final in trajectories]
    branches = []
    histories: list[list[str]] = [[] for _ in sims]
    off_track_counts = [0] * len(sims)
    for i, sim in enumerate(sims):  # probe_new: the first column, voted on only by finished ones
        ans, is_finish = sim.explore()
        branches.append({"finished": is_finish, "pruned": False})
        histories[i].append(ans)
    outcome = SimOutcome(answer=None, last_step=-1, how="max_steps")

    def off_track(i: int, disagrees: bool) -> bool:
        """Raise or reset branch ``i``'s disagreement streak; whether it reached the patience."""
        off_track_counts[i] = off_track_counts[i] + 1 if disagrees else 0
        return off_track_counts[i] >= prune_patience

    stable_cnt = 0
    prev_winner: str | None = None
    step = 0
    while step < max_steps:
        active_indices = []
        active_answers = []
        for i, branch in enumerate(branches):
            if branch["pruned"]:
                continue
            if not branch["finished"]:
                ans, is_finish = sims[i].explore()
                branch["finished"] = is_finish
                histories[i].append(ans)
            active_indices.append(i)
            active_answers.append(histories[i][-1])
        outcome.last_step = step
        if len(active_indices) == 0:
            outcome.how = "finished"
            break
        winner_ans = Counter(active_answers).most_common(1)[0][0]
        if step >= warm_up and len(active_indices) > 1:
            for i in active_indices:
                if not branches[i]["finished"] and off_track(i, histories[i][-1] != winner_ans):
                    branches[i]["pruned"] = True
                    outcome.pruned_at[i] = step
            active_indices = [i for i in active_indices if not branches[i]["pruned"]]
            active_answers = [histories[i][-1] for i in active_indices]
            if len(active_indices) == 0:
                outcome.how = "finished"
                break
            winner_ans = Counter(active_answers).most_common(1)[0][0]
        if winner_ans == prev_winner:
            stable_cnt += 1
        else:
            stable_cnt = 0
        prev_winner = winner_ans
        if stable_cnt >= T:
            outcome.answer, outcome.how = winner_ans, "stable"
            return outcome
        if all(b["finished"] or b["pruned"] for b in branches):
            outcome.how = "finished"
            break
        step += 1
    outcome.answer = prev_winner
    return outcome
