"""Parallel-Probe's controller against the authors' simulator, restated (reference_rules_parallel_probe):
the same stop round, the same branches dropped at the same rounds, the same answer."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from reference_rules_parallel_probe import SimOutcome, simulate

from strategies._parallel_probe_rules import Answer, ProbeParams, ProbeRules, plurality

NO_ANSWER = "ERR"  # how the authors' released probe matrices write a probe that gave no answer
Trajectory = tuple[list[Answer], Answer]


@dataclass
class Run:
    answer: Answer
    last_round: int
    how: str
    dropped_at: dict[int, int]


def controlled(trajectories: Sequence[Trajectory], params: ProbeParams) -> Run:
    """The controller fed as a live run would feed it: before round s, a branch whose trajectory
    has no probe answer at column s + 1 (column 0, at one interval, is never voted on) has
    finished; the others give that column."""
    rules = ProbeRules(params, tuple(range(len(trajectories))))
    dropped_at: dict[int, int] = {}
    while True:
        s = rules.round
        for branch in rules.running:
            probes, final = trajectories[branch]
            if s + 1 >= len(probes):
                rules.finish(branch, final)
        decision = rules.step({b: trajectories[b][0][s + 1] for b in rules.running})
        dropped_at.update(dict.fromkeys(decision.dropped, s))
        if decision.stop is not None:
            how = "finished" if decision.stop == "all finished" else decision.stop
            return Run(decision.majority, s, "max_steps" if how == "round limit" else how, dropped_at)


def referenced(trajectories: Sequence[Trajectory], params: ProbeParams) -> Run:
    def key(answer: Answer) -> str:
        return NO_ANSWER if answer is None else answer

    sim: SimOutcome = simulate(
        [([key(a) for a in probes], key(final)) for probes, final in trajectories],
        T=params.stable,
        prune_patience=params.patience,
        warm_up=params.warmup,
        max_steps=params.max_rounds if params.max_rounds is not None else 10**6,
    )
    answer = None if sim.answer == NO_ANSWER else sim.answer
    return Run(answer, sim.last_step, sim.how, sim.pruned_at)


def random_case(seed: int) -> tuple[list[Trajectory], ProbeParams]:
    """Branches whose answers drift (sticky random walks over a small alphabet, some probes
    answerless) and end at random lengths, some before the first vote."""
    rng = random.Random(seed)
    alphabet: list[Answer] = [str(k) for k in range(rng.randint(1, 4))]
    missing = rng.choice([0.0, 0.1, 0.4])
    trajectories = []
    for _ in range(rng.randint(1, 12)):
        answer: Answer = rng.choice(alphabet)
        probes = []
        for _ in range(rng.choice([0, 1, 2, rng.randint(3, 60)])):
            if rng.random() < 0.25:
                answer = rng.choice(alphabet)
            probes.append(None if rng.random() < missing else answer)
        trajectories.append((probes, rng.choice([*alphabet, None])))
    params = ProbeParams(
        stable=rng.randint(1, 10),
        patience=rng.randint(1, 5),
        warmup=rng.randint(0, 8),
        max_rounds=rng.choice([None, 100, rng.randint(1, 40)]),
    )
    return trajectories, params


@pytest.mark.parametrize("seed", range(300))
def test_the_controller_decides_as_the_authors_simulator(seed: int) -> None:
    trajectories, params = random_case(seed)
    assert controlled(trajectories, params) == referenced(trajectories, params)


def test_the_random_cases_cover_every_outcome() -> None:
    """The differential test above sees stops, drops, ends and limits, not one kind only."""
    runs = [controlled(*random_case(seed)) for seed in range(300)]
    assert {run.how for run in runs} == {"stable", "finished", "max_steps"}
    assert sum(bool(run.dropped_at) for run in runs) >= 30
    assert sum(run.answer is None for run in runs) >= 5


def test_main_table_run_stops_after_forty_repeats_and_drops_a_dissenter_after_seven() -> None:
    params = ProbeParams(stable=40, patience=7, warmup=15)
    rules = ProbeRules(params, (0, 1, 2))
    decisions = [rules.step({0: "7", 1: "7", 2: "3"}) for _ in range(22)]
    assert [d.dropped for d in decisions][:21] == [frozenset()] * 21  # 15 warmup rounds + 6 dissents
    assert decisions[21].dropped == {2} and rules.running == [0, 1]
    decisions += [rules.step({0: "7", 1: "7"}) for _ in range(19)]
    assert [d.stop for d in decisions] == [None] * 40 + ["stable"]  # 41 rounds, 40 repeats
    assert decisions[-1].majority == "7"


def test_a_tie_goes_to_the_answer_whose_first_voter_comes_first() -> None:
    assert plurality(["b", "a", "a", "b"]) == "b"
    assert plurality([None, "a"]) is None
    rules = ProbeRules(ProbeParams(stable=5, patience=1, warmup=0), (3, 1))
    assert rules.step({3: "x", 1: "y"}).majority == "x"  # branch order as given, not sorted


def test_a_finished_branch_votes_for_good_and_is_never_dropped() -> None:
    rules = ProbeRules(ProbeParams(stable=9, patience=1, warmup=0), (0, 1, 2))
    rules.finish(0, "4")
    first = rules.step({1: "5", 2: "5"})
    assert first.majority == "5" and first.dropped == frozenset()
    rules.finish(1, "4")
    second = rules.step({2: "5"})
    assert second.majority == "4" and second.dropped == {2} and second.stop == "all finished"


def test_a_round_must_answer_for_exactly_the_running_branches() -> None:
    rules = ProbeRules(ProbeParams(stable=2, patience=2, warmup=0), (0, 1))
    with pytest.raises(ValueError, match="needs the answers of"):
        rules.step({0: "1"})
