"""What a sweep is, besides the backend object: its task, problems, configurations, settings and folder.

The CLI (evals.run.settings), the demo and the results page build an EvalSpec and the runner runs
it; under ``--shard I/N`` (evals.run.shards) a process runs only the problems it owns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evals.run.combos import Combo
from evals.run.shards import Shard
from evals.tasks.base import Task
from evals.tasks.loading import DataSource
from paragen.config import Budget, spec_without_credentials
from paragen.prompts import PromptTemplate
from paragen.types import Problem, SamplingParams


@dataclass
class EvalSpec:
    """Everything a sweep needs besides the backend object."""

    task: Task
    problems: list[Problem]
    combos: list[Combo]
    out: Path
    backend_spec: str
    data: DataSource  # where ``problems`` came from (recorded in run.json, hashed into the settings)
    backend_options: dict[str, Any] = field(default_factory=dict)
    resume: bool = False
    new_run: bool = False  # with --resume: record other settings as a new run in the same folder
    max_concurrent: int = 8
    sampling: SamplingParams = field(default_factory=SamplingParams)
    budget: Budget = field(default_factory=Budget)  # per problem; a deadline records "deadline", never hangs
    seed: int = 0
    fail_fast: bool = False  # stop the sweep at the first problem whose run raised (once recorded)
    seeds: list[int] = field(default_factory=list)  # several sampling seeds: the sweep runs once per seed
    progress: bool = True
    grader_workers: int = 2
    shard: Shard | None = None  # --shard I/N: run only this part of the sweep (evals.run.shards)
    prompt: PromptTemplate | None = None  # None: the task's default template
    preset: dict[str, Any] | None = None  # the published setting run (evals.run.presets), kept in run.json

    def __post_init__(self) -> None:
        # The spec is written into run.json and every record: a key in its URL must not be.
        self.backend_spec = spec_without_credentials(self.backend_spec)


def seed_samplings(spec: EvalSpec) -> list[SamplingParams]:
    """The sampling of each pass of the sweep: one per seed of ``--seeds``, else ``spec.sampling``."""
    return [spec.sampling.model_copy(update={"seed": s}) for s in spec.seeds] or [spec.sampling]


def owned_problems(spec: EvalSpec, seed: int | None, combo: Combo) -> list[Problem]:
    """The problems of ``combo`` at ``seed`` that this process runs: all of them without a shard."""
    if spec.shard is None:
        return list(spec.problems)
    seeds = [sampling.seed for sampling in seed_samplings(spec)]
    first = (seeds.index(seed) * len(spec.combos) + spec.combos.index(combo)) * len(spec.problems)
    return [p for i, p in enumerate(spec.problems) if spec.shard.owns(first + i)]
