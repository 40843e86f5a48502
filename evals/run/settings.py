"""What a sweep is asked to be, typed, and the EvalSpec built from it.

`paragen eval` reads its flags into a :class:`SweepRequest`; a preset (:mod:`evals.run.presets`)
fills the fields the command line did not give (:func:`with_preset`, value for value, no text in
between); :func:`build_spec` resolves the task, prompt, problems and configurations. Every setting
is checked before a problem is loaded: a configuration that cannot run stops the sweep before it
starts.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from evals.run.presets import Preset
from evals.run.shards import Shard
from evals.run.spec import BackendSetup, EvalSpec, Execution, RunFolder, Sampling
from evals.tasks import Selection, Task
from evals.tasks.loading import SourceChoice
from paragen.cli_options import BackendChoice, unique, validated
from paragen.config import Budget
from paragen.errors import ConfigError
from paragen.types import SamplingParams

# The request's fields a preset fills when the command line does not give them (also their flags' names).
PRESET_FIELDS = ("task", "strategies", "ns", "seeds", "limit", "prompt", "max_tokens", "temperature",
                 "top_p", "split", "question_field", "answer_field", "id_field", "revision")  # fmt: skip
N_HINT = "give positive integers separated by commas, e.g. 1,4,8"
SEEDS_HINT = "give seeds separated by commas, e.g. 0,1,2"


@dataclass(frozen=True)
class SweepRequest:
    """The settings of one sweep as given: names and values, before the task and problems are loaded."""

    out: Path
    task: str | None = None  # a built-in task, a file, or hf:ID
    strategies: list[str] = field(default_factory=lambda: ["single"])
    ns: list[int] | None = None  # None: each strategy's own default count
    strategy_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    preset_options: dict[str, dict[str, Any]] = field(default_factory=dict)  # under strategy_options
    seeds: list[int] = field(default_factory=list)  # several: the sweep runs once per seed
    seed: int | None = None
    limit: int | None = None
    offset: int = 0
    ids: list[str] = field(default_factory=list)
    shuffle: int | None = None  # the shuffle's seed; None: the task's order
    prompt: str | None = None  # a template name or file; None: the task's
    max_tokens: int = 512
    temperature: float = 0.7
    top_p: float | None = None
    deadline: float | None = None
    max_total_tokens: int | None = None
    question_field: str | None = None
    answer_field: str | None = None
    id_field: str | None = None
    grading: str | None = None
    split: str = "train"
    revision: str | None = None
    offline: bool = False
    hub: bool = False
    resume: bool = False
    new_run: bool = False
    max_concurrent: int = 8
    progress: bool = True
    fail_fast: bool = False
    shard: Shard | None = None
    preset: dict[str, Any] | None = None  # what run.json keeps of the preset run
    judges: list[str] = field(default_factory=list)  # --judge: the specs as shown (no credentials)


def checked_ns(values: list[int], shown: str) -> list[int]:
    """The n values, refused when one is not positive or repeats (``shown``: as the user wrote them)."""
    if not values or any(n <= 0 for n in values):
        raise ConfigError(f"bad --n {shown!r}", hint=N_HINT)
    return unique(values, "--n")


def checked_seeds(values: list[int], shown: str) -> list[int]:
    """The sampling seeds, refused when one is negative, out of range or repeats."""
    if not values or any(v < 0 for v in values):
        raise ConfigError(f"bad --seeds {shown!r}", hint=SEEDS_HINT)
    for value in values:
        validated(SamplingParams, seed=value)
    return unique(values, "--seeds")


def with_preset(request: SweepRequest, preset: Preset, given: Collection[str]) -> SweepRequest:
    """``request`` with the preset's values in the fields not ``given`` on the command line.

    A given ``seed`` counts as given ``seeds``: the flag and the preset's seeds would contradict.
    """
    given = {*given, "seeds"} if "seed" in given else set(given)
    fields = preset.task_fields
    values: dict[str, Any] = {
        "task": preset.task, "strategies": preset.strategies, "ns": preset.n, "seeds": preset.seeds,
        "limit": preset.limit, "prompt": preset.prompt_spec(), "max_tokens": preset.max_tokens,
        "temperature": preset.temperature, "top_p": preset.top_p, "split": preset.split,
        "question_field": fields.get("question"), "answer_field": fields.get("answer"),
        "id_field": fields.get("id"), "revision": preset.revision,
    }  # fmt: skip
    taken = {k: v for k, v in values.items() if k not in given and v is not None}
    if "strategies" in taken:
        taken["strategies"] = unique(list(taken["strategies"]), "--strategies")
    if "ns" in taken:
        taken["ns"] = checked_ns(list(taken["ns"]), ",".join(str(n) for n in taken["ns"]))
    if "seeds" in taken:
        taken["seeds"] = checked_seeds(list(taken["seeds"]), ",".join(str(s) for s in taken["seeds"]))
    overridden = sorted(k for k in given if values.get(k) is not None)
    record = {**preset.record(), "overridden": overridden}
    return replace(request, **taken, preset_options=preset.strategy_options(), preset=record)


def build_spec(
    request: SweepRequest, backend: BackendChoice, named: Mapping[str, BackendChoice] | None = None
) -> EvalSpec:
    """The sweep ``request`` asks for on ``backend`` (and the ``named`` backends its strategies may
    read with): its task, problems and configurations resolved."""
    from evals.run.combos import build_combos
    from evals.run.prompts import get_template
    from evals.tasks import at_revision, get_task, load_task
    from paragen.named_backends import check_readers

    if request.task is None:
        raise ConfigError("no task given", hint="pass -t TASK, or --preset NAME")
    template = None if request.prompt is None else get_template(request.prompt)
    task = get_task(request.task, question=request.question_field, answer=request.answer_field,
                    id_field=request.id_field, grading=request.grading, split=request.split)  # fmt: skip
    if request.revision is not None:
        task = at_revision(task, request.revision)
    check_judges(task, request.judges)
    selection = _selection(request)
    at_least(request.max_concurrent, 1, "--max-concurrent")
    sampling = _sampling(request)
    budget = validated(Budget, deadline_s=request.deadline, max_total_tokens=request.max_total_tokens)
    source = _data_source(request)
    options = {
        name: {**request.preset_options.get(name, {}), **request.strategy_options.get(name, {})}
        for name in request.strategies
    }
    combos = build_combos(request.strategies, request.ns, options)
    named = named or {}
    check_readers([c.strategy for c in combos], named)  # here, not at the first problem: no model loaded yet
    loaded = load_task(task, selection, source=source)
    return EvalSpec(
        task=task, problems=loaded.problems, data=loaded.source, combos=combos,
        backend=BackendSetup(backend.shown, backend.options),
        backends={name: BackendSetup(choice.shown, choice.options) for name, choice in named.items()},
        folder=RunFolder(request.out, resume=request.resume, new_run=request.new_run),
        sampling=Sampling(sampling, seeds=request.seeds if len(request.seeds) > 1 else [], budget=budget),
        execution=Execution(max_concurrent=request.max_concurrent, progress=request.progress,
                            fail_fast=request.fail_fast, shard=request.shard),
        prompt=template, preset=request.preset, shuffle_seed=request.shuffle or 0, judges=request.judges,
    )  # fmt: skip


def check_judges(task: Task, judges: list[str]) -> None:
    """A proof task needs judges, and only a proof task takes them."""
    if task.proof and not judges:
        raise ConfigError(
            f"task {task.name!r} is graded by judges: give --judge SPEC (a backend, e.g. openai:URL)",
            hint="--judge may be given several times; their scores are averaged",
        )
    if judges and not task.proof:
        raise ConfigError(f"--judge grades proof tasks; {task.name!r} is graded by math-verify")


def at_least(value: int | None, least: int, flag: str) -> None:
    if value is not None and value < least:
        raise ConfigError(f"bad {flag} {value}: it must be at least {least}")


def _sampling(request: SweepRequest) -> SamplingParams:
    one_seed = request.seeds[0] if len(request.seeds) == 1 else request.seed
    top = {} if request.top_p is None else {"top_p": request.top_p}
    sampling: SamplingParams = validated(
        SamplingParams, max_tokens=request.max_tokens, temperature=request.temperature, seed=one_seed, **top
    )
    return sampling


def _selection(request: SweepRequest) -> Selection:
    at_least(request.limit, 1, "--limit")
    at_least(request.offset, 0, "--offset")
    shuffle = request.shuffle
    return Selection(
        limit=request.limit,
        offset=request.offset,
        ids=request.ids,
        shuffle=shuffle is not None,
        seed=shuffle or 0,
    )


def _data_source(request: SweepRequest) -> SourceChoice:
    if request.offline and request.hub:
        raise ConfigError("--offline and --hub contradict each other", hint="give one of them")
    if request.offline and request.revision is not None:
        raise ConfigError(
            "--revision and --offline contradict each other",
            hint="--revision asks the hub for that revision; --offline never uses the hub",
        )
    return "bundled" if request.offline else "hub" if request.hub else "auto"
