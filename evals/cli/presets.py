"""`paragen presets` and how `paragen eval --preset NAME` fills the flags not given."""

from __future__ import annotations

from typing import Any

import typer

from evals.run.presets import Preset
from paragen.cli_options import fail
from paragen.errors import ParagenError

# Preset fields -> the eval_command parameters they fill when not given on the command line.
_PRESET_PARAMS = ("task", "strategies", "ns", "seeds", "limit", "prompt", "max_tokens", "temperature",
                  "top_p", "split", "question_field", "answer_field", "id_field", "revision")  # fmt: skip


def preset_over(
    ctx: typer.Context, name: str | None
) -> tuple[Preset | None, dict[str, Any] | None, dict[str, Any]]:
    """The preset, what run.json keeps of it, and the values it gives the flags not given."""
    from evals.run.presets import load_preset

    if name is None:
        return None, None, {}
    preset = load_preset(name)
    given = {p for p in _PRESET_PARAMS if _on_command_line(ctx, p)}
    if _on_command_line(ctx, "seed"):
        given.add("seeds")  # --seed and the preset's seeds would contradict each other: the flag wins
    fields = preset.task_fields
    values = {
        "task": preset.task, "strategies": ",".join(preset.strategies),
        "ns": None if preset.n is None else ",".join(str(n) for n in preset.n),
        "seeds": None if preset.seeds is None else ",".join(str(s) for s in preset.seeds),
        "limit": preset.limit, "prompt": preset.prompt_spec(), "max_tokens": preset.max_tokens,
        "temperature": preset.temperature, "top_p": preset.top_p, "split": preset.split,
        "question_field": fields.get("question"), "answer_field": fields.get("answer"),
        "id_field": fields.get("id"), "revision": preset.revision,
    }  # fmt: skip
    over = {k: v for k, v in values.items() if k not in given and v is not None}
    overridden = sorted(k for k in given if values.get(k) is not None)
    return preset, {**preset.record(), "overridden": overridden}, over


def presets_command() -> None:
    """List the presets: published settings to run with `paragen eval --preset NAME`."""
    from evals.run.presets import describe, load_preset, preset_names

    try:
        for name in preset_names():
            typer.echo(describe(load_preset(name)))
    except ParagenError as exc:
        fail(exc)


def _on_command_line(ctx: typer.Context, param: str) -> bool:
    source = ctx.get_parameter_source(param)
    return source is not None and source.name == "COMMANDLINE"
