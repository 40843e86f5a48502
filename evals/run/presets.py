"""Presets: one TOML file per published setting, run by name with ``paragen eval --preset NAME``.

A preset holds what a reproduction needs: the paper, the model, the task (and its data
revision where the task pins one), the prompt template, temperature, top-p, max tokens, the
n values, the strategies and their options, and the published figures with the table or
section they come from. ``reproduced = false`` says, in every file, that its figures were
not reproduced with paragen. Flags given on the command line override the preset's values;
the preset itself is recorded in run.json, and the report puts each published figure beside
the measured one (see :mod:`evals.analysis.published`).

Files live in ``evals/presets/``; ``paragen presets`` lists them.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

from paragen.errors import ConfigError, describe_invalid

PRESET_DIR = Path(__file__).resolve().parent.parent / "presets"
Metric = Literal["accuracy", "pass@1", "maj@k", "pass@k", "token_saving", "path_saving", "speedup"]
COMPARISONS = ("token_saving", "path_saving", "speedup")  # the metrics measured against a baseline


def unit_of(metric: str) -> str:
    """How a metric's values read: "x" for a speedup factor, "%" for every other metric."""
    return "x" if metric == "speedup" else "%"


class Published(BaseModel):
    """One published figure: what was measured, on which configuration, its value and source.

    ``value`` is in percent, as papers print it, except a ``speedup``'s, a factor (1.8 for
    1.8x). ``metric``: ``accuracy`` (the strategy's own answer), ``pass@1`` (pass@1 averaged
    over its samples), ``maj@k`` (the vote over its samples), ``pass@k`` (k = n),
    ``token_saving`` (1 - its mean total tokens over ``baseline``'s, on the problems both ran),
    ``path_saving`` (1 - the fewest paths, among the n it ran, whose accuracy reaches
    ``baseline``'s at ``baseline_n``, over ``baseline_n``: CISC's "fewer paths for the same
    accuracy"), or ``speedup`` (``baseline``'s mean end-to-end latency over its own, on the
    problems both ran). The three comparisons need ``baseline``; ``path_saving`` needs
    ``baseline_n`` too.
    """

    model_config = ConfigDict(extra="forbid")

    metric: Metric
    strategy: str
    n: int | None = None  # None: the strategy's only configuration in the run
    value: float
    source: str  # paper and table / section, or file of the reference code
    baseline: str | None = None  # the comparisons: the strategy it is measured against
    baseline_n: int | None = None
    note: str = ""

    @model_validator(mode="after")
    def _comparisons_name_their_baseline(self) -> Published:
        if self.metric in COMPARISONS and self.baseline is None:
            raise ValueError(f"a {self.metric} figure needs baseline = the strategy it is measured against")
        if self.metric == "path_saving" and self.baseline_n is None:
            raise ValueError("a path_saving figure needs baseline_n = the baseline's paths it is measured at")
        return self


class Preset(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    paper: str
    model: str
    task: str
    prompt: str  # a template name, or a file next to the preset
    temperature: float
    top_p: float
    max_tokens: int
    n: list[int] | None = None
    strategies: list[str]
    # Per strategy. TOML has no null: the string "none" stands for None (e.g. consensus = "none").
    options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    seeds: list[int] | None = None
    limit: int | None = None
    task_fields: dict[str, str] = Field(default_factory=dict)  # question / answer / id, for hf: tasks
    split: str | None = None
    revision: str | None = None  # hf: tasks; built-in tasks pin their own
    reproduced: Literal[False]  # the figures below were not reproduced with paragen
    note: str = ""
    published: list[Published] = Field(min_length=1)

    def strategy_options(self) -> dict[str, dict[str, Any]]:
        return {
            name: {k: None if v == "none" else v for k, v in opts.items()}
            for name, opts in self.options.items()
        }

    def prompt_spec(self) -> str:
        """The template name, or the path of a prompt file shipped beside the preset."""
        beside = PRESET_DIR / self.prompt
        return str(beside) if beside.suffix and beside.is_file() else self.prompt

    def record(self) -> dict[str, Any]:
        """What run.json keeps of the preset (all of it: the report compares with ``published``)."""
        return self.model_dump(mode="json")


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.toml") if not p.name.endswith(".prompt.toml"))


def load_preset(name: str) -> Preset:
    """The preset of that name (or a TOML file path); one ConfigError line when it cannot be used."""
    path = Path(name) if name.endswith(".toml") else PRESET_DIR / f"{name}.toml"
    if not path.is_file():
        raise ConfigError(f"unknown preset {name!r}", hint=f"use one of {', '.join(preset_names())}")
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read preset {path}: {exc}") from None
    try:
        preset = Preset.model_validate({"name": path.stem, **table})
    except ValidationError as exc:
        raise ConfigError(f"preset {path} is not valid: {describe_invalid(exc, whole='the file')}") from None
    check_options(preset, path)
    return preset


def check_options(preset: Preset, path: Path) -> None:
    """The preset's ``[options.NAME]`` read by the rules of ``-O NAME.KEY=VALUE``: NAME among its
    strategies, KEY a field of NAME's config other than its count (set by ``n``), VALUE of that
    field's type; one ConfigError line for the first that is not."""
    from paragen.registry import load_strategy
    from paragen.strategy import count_field

    for name, options in preset.strategy_options().items():
        where = f"preset {path}: [options.{name}]"
        if name not in preset.strategies:
            raise ConfigError(
                f"{where} names {name!r}, which is not among its strategies",
                hint=f"its strategies: {', '.join(preset.strategies)}",
            )
        cls = load_strategy(name)
        fields = cls.Config.model_fields
        for key, value in options.items():
            if key in ("n", count_field(cls)):
                raise ConfigError(f"{where} {key}: the preset's n sets it", hint="e.g. n = [1, 4, 8]")
            if key not in fields:
                raise ConfigError(
                    f"{where} has no option {key!r}", hint=f"{name}'s options: {', '.join(sorted(fields))}"
                )
            # The field alone, with its type and bounds: checks tied to other fields wait for the run.
            field = fields[key]
            definition: dict[str, Any] = {key: (field.annotation, field)}
            try:
                create_model("Option", **definition).model_validate({key: value})
            except ValidationError as exc:
                raise ConfigError(f"{where} {describe_invalid(exc)}") from None


def describe(preset: Preset) -> str:
    figures = "; ".join(
        f"{p.metric} {p.strategy}{'' if p.n is None else f' n={p.n}'}"
        f"{'' if p.baseline is None else f' vs {p.baseline}'} {p.value:g}{unit_of(p.metric)}"
        for p in preset.published
    )
    return f"{preset.name}: {preset.model} on {preset.task} ({preset.paper}): {figures}"
