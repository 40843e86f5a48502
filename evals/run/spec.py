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

_SECRET_HINTS = ("key", "secret", "password", "token", "auth")


@dataclass(frozen=True)
class Sampling:
    """How every problem is sampled: the parameters, the seeds the sweep passes over, the budget."""

    params: SamplingParams = field(default_factory=SamplingParams)
    seeds: list[int] = field(default_factory=list)  # several sampling seeds: the sweep runs once per seed
    budget: Budget = field(default_factory=Budget)  # per problem; a deadline records "deadline", never hangs

    def passes(self) -> list[SamplingParams]:
        """The sampling of each pass of the sweep: one per seed of ``--seeds``, else ``params``."""
        return [self.params.model_copy(update={"seed": s}) for s in self.seeds] or [self.params]

    def setting(self) -> SamplingParams:
        """The sampling the run's settings hold: without a seed when the sweep passes over several,
        so the seeds of one setting share its settings id."""
        return self.params.model_copy(update={"seed": None}) if len(self.seeds) > 1 else self.params


@dataclass(frozen=True)
class BackendSetup:
    """The backend as the run records it: its spec and options, never a credential."""

    spec: str
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # The spec is written into run.json and every record: a key in its URL must not be.
        object.__setattr__(self, "spec", spec_without_credentials(self.spec))

    def recorded_options(self) -> dict[str, Any]:
        """The options run.json keeps: those whose names suggest a secret are left out."""
        return {k: v for k, v in self.options.items() if not any(h in k.lower() for h in _SECRET_HINTS)}


@dataclass(frozen=True)
class RunFolder:
    """Where the sweep is written, and whether it goes on with what the folder holds."""

    path: Path
    resume: bool = False  # run only what the folder's records lack
    new_run: bool = False  # with resume: record other settings as a new run in the same folder


@dataclass(frozen=True)
class Execution:
    """How this process runs the sweep; none of it changes a result."""

    max_concurrent: int = 8  # problems in flight at once
    grader_workers: int = 2
    progress: bool = True
    fail_fast: bool = False  # stop the sweep at the first problem whose run raised (once recorded)
    shard: Shard | None = None  # --shard I/N: run only this part of the sweep (evals.run.shards)


@dataclass
class EvalSpec:
    """Everything a sweep needs besides the backend object."""

    task: Task
    problems: list[Problem]
    data: DataSource  # where ``problems`` came from (recorded in run.json, hashed into the settings)
    combos: list[Combo]
    backend: BackendSetup
    folder: RunFolder
    # Second backends by name (--named-backend), for strategies that read with one (``reader``).
    backends: dict[str, BackendSetup] = field(default_factory=dict)
    sampling: Sampling = field(default_factory=Sampling)
    execution: Execution = field(default_factory=Execution)
    prompt: PromptTemplate | None = None  # None: the task's default template
    preset: dict[str, Any] | None = None  # the published setting run (evals.run.presets), kept in run.json
    shuffle_seed: int = 0  # the seed the problems were shuffled with (run.json's and each record's "seed")
    judges: list[str] = field(default_factory=list)  # a proof task: its judges' specs, credentials left out


def owned_problems(spec: EvalSpec, seed: int | None, combo: Combo) -> list[Problem]:
    """The problems of ``combo`` at ``seed`` that this process runs: all of them without a shard."""
    shard = spec.execution.shard
    if shard is None:
        return list(spec.problems)
    seeds = [sampling.seed for sampling in spec.sampling.passes()]
    first = (seeds.index(seed) * len(spec.combos) + spec.combos.index(combo)) * len(spec.problems)
    return [p for i, p in enumerate(spec.problems) if shard.owns(first + i)]
