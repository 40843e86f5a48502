"""The run's records: one typed JSONL line per finished (task, problem, strategy, n, settings).

Every line is appended, flushed and fsynced as soon as its problem finishes, so a killed
run loses at most the problems in flight. A line cut short by the kill is dropped on the
next open (the file is truncated back to its last full line). Any other line that is not
a valid :class:`EvalRecord` stops the reader with one line naming it: a report is never
computed over a file that was silently skipped in part.

A record's key holds what decides its result besides the problem: the strategy, its n,
a ``settings_id`` (a hash of the data, grading mode, backend, sampling, budget and the
strategy's config) and the sampling seed. A sweep over several seeds (``--seeds``) hashes
its sampling without a seed, so its seeds share a settings id and differ in the key.
``--resume`` skips every key already recorded with a result, and
retries records whose outcome is ``error`` (the backend failed; that is not a result of
the model) or ``failed`` (the run raised: a bug, kept in the record's ``failure`` with its
type, message and traceback), so the last record of a key is the one that counts.

``run.json`` is a :class:`RunInfo`. A resume with the same settings keeps its ``run_id``,
``started_at`` and settings, adds the problems and strategies of this invocation that are
new to ``problems`` and ``strategies``, and the time to ``resumed_at``. A resume with
other settings is refused; ``--new-run`` records them as a new run in the same folder (a
new ``run_id`` and ``settings_id``; the previous run's info moves to ``earlier``), and
reports keep the two apart.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evals.run.prompts import PromptRecord, PromptRef
from evals.tasks.loading import DataSource
from paragen.config import Budget
from paragen.errors import ConfigError, describe_invalid
from paragen.types import Problem, SamplingParams, StrategyResult

RECORDS_FILE = "records.jsonl"
RUN_FILE = "run.json"
SCHEMA = 2
"""Version of the record and run.json layout (1: untyped records without settings or data source)."""

Key = tuple[str, str, str, int, str, int]
"""(task, problem id, strategy, n, settings id, sampling seed or -1): what a record is unique by."""

RETRIED_OUTCOMES = frozenset({"error", "failed"})
"""Outcomes that are not results (the backend failed, or the run raised), so resume runs them again."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class JudgeScore(_Strict):
    """One judge's verdict on a proof (evals.run.judging): its spec (no credentials), its 0-7 score
    (None: no score could be read from its reply), its whole reply and the tokens it wrote."""

    judge: str
    score: int | None
    reasoning: str
    tokens: int
    cause: str | None = None  # why there is no score


class GradeRecord(_Strict):
    outcome: Literal[
        "correct", "incorrect", "no_answer", "truncated", "error", "failed", "grader_timeout", "grader_error"
    ]
    correct: bool
    answer: str | None
    gold: str | None
    cause: str | None = None
    # Proof tasks only: the judges' mean score (0-7) and each judge's verdict.
    score: float | None = None
    judges: list[JudgeScore] | None = None


class RunFailure(_Strict):
    """Why a problem's run raised instead of ending in a result (outcome ``failed``)."""

    type: str  # the exception's qualified name
    message: str
    traceback: str


class RunSettings(_Strict):
    """What decides a run's results besides the problem and the strategy (hashed into keys)."""

    task: str
    data_sha256: str
    grading_mode: str
    backend: str
    backend_options: dict[str, Any] = Field(default_factory=dict)
    # Second backends by name (--named-backend NAME=SPEC) -> their specs, never a credential; empty
    # keeps the settings ids of runs recorded before they existed.
    backends: dict[str, str] = Field(default_factory=dict)
    sampling: SamplingParams
    budget: Budget
    # The prompt template's hash when it is not paragen's own wording (None keeps the settings
    # ids of runs recorded before templates existed).
    prompt: str | None = None


class StrategyEntry(_Strict):
    name: str
    n: int
    config: dict[str, Any]


class ShardInfo(_Strict):
    """Which part of a sharded sweep a run folder holds (see :mod:`evals.run.shards`)."""

    sweep: str  # fingerprint of the whole sweep: every shard of one sweep records the same
    count: int  # the sweep's number of shards
    indices: list[int]  # the shards held (1-based): one for a shard, several for a merged folder
    runs: list[str] = Field(default_factory=list)  # a merged folder: the run ids of its shards


class RunInfo(_Strict):
    """run.json: the run's settings, data source, problems and versions."""

    schema_version: Literal[2] = Field(default=2, alias="schema")
    run_id: str
    started_at: float
    resumed_at: list[float] = Field(default_factory=list)
    settings: RunSettings
    data: DataSource
    strategies: list[StrategyEntry]
    problems: list[str]
    seed: int
    max_concurrent: int
    versions: dict[str, str]
    seeds: list[int] = Field(default_factory=list)  # --seeds: the sweep ran once per sampling seed
    earlier: list[dict[str, Any]] = Field(default_factory=list)
    # This invocation's counters (paragen.metrics: runs by outcome, tokens by kind, latency
    # histograms), written when its sweep ends.
    metrics: dict[str, float] = Field(default_factory=dict)
    shard: ShardInfo | None = None  # --shard I/N, or a merge of shards: the part of the sweep held
    # True from the start of an invocation until its sweep has recorded every problem: a run
    # killed, interrupted or crashed before its end stays marked partial; a resume that
    # completes it sets it back to False.
    partial: bool = False
    prompt: PromptRecord | None = None  # the words the problems were asked in
    judges: list[str] | None = None  # a proof task: the judges' specs (no credentials), in order
    preset: dict[str, Any] | None = None  # the published setting this run reproduces (evals.run.presets)
    # The model that answered (evals.run.preflight): the engine's name, file and sha256, or the
    # server's /models entry; a preset's own model beside it, and whether they are the same.
    model: dict[str, Any] | None = None
    preset_model: str | None = None
    model_matches_preset: bool | None = None


class EvalRecord(_Strict):
    """One line of records.jsonl: a problem's result under one strategy, graded, with its settings."""

    schema_version: Literal[2] = Field(default=2, alias="schema")
    run_id: str
    settings_id: str
    task: str
    grading_mode: Literal["auto", "boxed", "answer_is", "last_number"]
    problem: Problem
    strategy: str
    n: int
    strategy_config: dict[str, Any]
    result: StrategyResult
    grade: GradeRecord
    backend: str
    sampling: SamplingParams
    seed: int
    versions: dict[str, str]
    recorded_at: float
    failure: RunFailure | None = None  # outcome "failed": what the run raised
    prompt: PromptRef | None = None  # the template the problem was asked in (its words: run.json)
    model: str | None = None  # the name of the model that answered (run.json has its file and hash)

    @property
    def key(self) -> Key:
        seed = -1 if self.sampling.seed is None else self.sampling.seed
        return (self.task, self.problem.id, self.strategy, self.n, self.settings_id, seed)

    def to_line(self) -> str:
        # Without a failure the line carries no ``failure`` key, so readers that lack the field read it.
        # Likewise without a prompt.
        exclude: dict[str, Any] = {n: True for n in ("failure", "prompt") if getattr(self, n) is None}
        # Likewise a grade without judges (every task but proofs) keeps its old fields only.
        if self.grade.judges is None:
            exclude["grade"] = {"score", "judges"}
        return self.model_dump_json(by_alias=True, exclude=exclude) + "\n"


def record_key(record: EvalRecord) -> Key:
    return record.key


def settings_id(settings: RunSettings, strategy_config: dict[str, Any]) -> str:
    """A short hash of everything that changes a record's result besides its problem."""
    # A run in paragen's own wording, on one backend, hashes as it did before templates and named
    # backends were recorded.
    unset = {"prompt"} if settings.prompt is None else set()
    if not settings.backends:
        unset.add("backends")
    dumped = settings.model_dump(mode="json", exclude=unset)
    blob = json.dumps({"settings": dumped, "strategy": strategy_config}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def versions() -> dict[str, str]:
    """Versions of what decides the numbers: paragen, the grader and the data libraries."""
    found = {"python": platform.python_version()}
    for name in ("paragen", "math-verify", "datasets", "torch", "transformers", "sympy"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


@dataclass
class RecordSet:
    """A run's records as read: every valid line in order, and whether a torn last line was left out."""

    records: list[EvalRecord] = field(default_factory=list)
    torn_tail: bool = False

    def latest(self) -> list[EvalRecord]:
        """One record per key, the last written (a retried error is replaced by its retry)."""
        by_key: dict[Key, EvalRecord] = {}
        for record in self.records:
            by_key.pop(record.key, None)
            by_key[record.key] = record
        return list(by_key.values())


def records_path(run_dir: Path) -> Path:
    return run_dir / RECORDS_FILE


def load_records(run_dir: Path) -> RecordSet:
    """Every record of a run; one ConfigError line naming the first line that is not a record."""
    path = records_path(run_dir)
    if not path.exists():
        return RecordSet()
    if not path.is_file():
        raise ConfigError(f"{path} is not a file", hint="a run folder holds records.jsonl as a file")
    found = RecordSet()
    for number, line in _lines(path):
        if not line.endswith("\n"):
            found.torn_tail = True  # what a kill mid-write leaves; the writer cuts it off
            break
        found.records.append(parse_record(line, path, number))
    return found


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    try:
        with path.open(encoding="utf-8") as handle:
            yield from enumerate(handle, start=1)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None


def parse_record(line: str, path: Path, number: int) -> EvalRecord:
    where = f"{path} line {number}"
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where} is not JSON ({exc.msg})", hint="remove or repair that line") from None
    if isinstance(data, dict) and data.get("schema") != SCHEMA and "schema" in data:
        raise ConfigError(
            f"{where} is a schema {data['schema']} record; this paragen reads schema {SCHEMA}",
            hint="re-run the eval with this version",
        )
    try:
        return EvalRecord.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{where} is not a valid record: {_first_error(exc)}") from None


def _first_error(exc: ValidationError) -> str:
    more = exc.error_count() - 1
    return describe_invalid(exc, whole="the line") + (f" (and {more} more)" if more else "")


def read_records(run_dir: Path) -> list[EvalRecord]:
    return load_records(run_dir).records


@dataclass
class RecordWriter:
    """Appends records durably; knows which keys hold a result already (for resume)."""

    path: Path
    done: set[Key]

    @classmethod
    def open(cls, run_dir: Path) -> RecordWriter:
        run_dir.mkdir(parents=True, exist_ok=True)
        path = records_path(run_dir)
        _drop_partial_line(path)
        latest = load_records(run_dir).latest()
        return cls(path, {r.key for r in latest if r.grade.outcome not in RETRIED_OUTCOMES})

    def append(self, record: EvalRecord) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(record.to_line())
            handle.flush()
            os.fsync(handle.fileno())
        if record.grade.outcome not in RETRIED_OUTCOMES:
            self.done.add(record.key)


def _drop_partial_line(path: Path) -> None:
    """Cut a last line left without its newline by a kill, so the next append starts clean."""
    if not path.is_file():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with path.open("r+b") as handle:
            handle.truncate(data.rfind(b"\n") + 1)
            handle.flush()
            os.fsync(handle.fileno())


def prepare_run(run_dir: Path, fresh: RunInfo, *, resume: bool, new_run: bool) -> RunInfo:
    """The run info to write for this invocation; refuses what would mix or lose results.

    Checked before anything is written: an existing run needs ``--resume``; a resume whose
    settings differ from the recorded ones needs ``--new-run``.
    """
    path = records_path(run_dir)
    has_records = path.exists() and (not path.is_file() or path.stat().st_size > 0)
    if has_records and not (resume or new_run):
        raise ConfigError(
            f"{path} already has records", hint="pass --resume to continue it, or pick a new --out"
        )
    old = read_run_info(run_dir) if (run_dir / RUN_FILE).exists() else None
    if old is None:
        return fresh
    change = _settings_change(old, fresh)
    if change is None:
        known, combos = set(old.problems), {(s.name, s.n) for s in old.strategies}
        update = {
            "problems": old.problems + [p for p in fresh.problems if p not in known],
            "strategies": old.strategies + [s for s in fresh.strategies if (s.name, s.n) not in combos],
            "resumed_at": [*old.resumed_at, time.time()],
            "seeds": old.seeds + [s for s in fresh.seeds if s not in old.seeds],
            "prompt": old.prompt or fresh.prompt,
            "preset": old.preset or fresh.preset,
            "judges": fresh.judges or old.judges,  # this invocation's judges
            "model": fresh.model or old.model,  # this invocation's model (a resume on another says so)
            "preset_model": fresh.preset_model or old.preset_model,
            "model_matches_preset": _either(fresh.model_matches_preset, old.model_matches_preset),
        }
        return old.model_copy(update=update)
    if not new_run:
        raise ConfigError(
            f"{run_dir} was recorded with other settings ({change})",
            hint="pass --new-run to record them as a new run in the same folder, or pick a new --out",
        )
    earlier = [*old.earlier, old.model_dump(mode="json", by_alias=True, exclude={"earlier"})]
    return fresh.model_copy(update={"earlier": earlier})


def _either(fresh: bool | None, old: bool | None) -> bool | None:
    return old if fresh is None else fresh


def _settings_change(old: RunInfo, new: RunInfo) -> str | None:
    """The first setting that differs between two runs, as 'name: old -> new', or None."""
    before, after = old.settings.model_dump(mode="json"), new.settings.model_dump(mode="json")
    for name in before:
        if before[name] != after[name]:
            return f"{name}: {_short(before[name])} -> {_short(after[name])}"
    configs = {(s.name, s.n): s.config for s in old.strategies}
    for entry in new.strategies:
        recorded = configs.get((entry.name, entry.n))
        if recorded is not None and recorded != entry.config:
            return f"{entry.name} n={entry.n} config: {_short(recorded)} -> {_short(entry.config)}"
    return None


def _short(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={v}" for k, v in value.items()) + "}"
    return str(value)


def write_run_info(run_dir: Path, info: RunInfo) -> None:
    """run.json, replaced atomically (see the module docstring for what a resume keeps)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    target = run_dir / RUN_FILE
    tmp = target.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write(info.model_dump_json(by_alias=True, indent=2))
        fh.flush()
        os.fsync(fh.fileno())  # renamed only once on disk: a crash leaves the old run.json or the new
    os.replace(tmp, target)


def read_run_info(run_dir: Path) -> RunInfo:
    target = run_dir / RUN_FILE
    try:
        return RunInfo.model_validate_json(target.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {target}: {exc.strerror or exc}") from None
    except ValidationError as exc:
        raise ConfigError(f"{target} is not a valid run.json: {_first_error(exc)}") from None


def run_infos(run_dir: Path) -> Sequence[RunInfo]:
    """The current run of the folder and the earlier ones (``--new-run``), oldest first."""
    if not (run_dir / RUN_FILE).is_file():
        return []
    current = read_run_info(run_dir)
    return [*(RunInfo.model_validate(e) for e in current.earlier), current]
