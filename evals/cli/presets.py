"""`paragen presets`: the published settings that `paragen eval --preset NAME` runs (evals.run.presets)."""

from __future__ import annotations

import typer

from paragen.cli_options import fail
from paragen.errors import ParagenError


def presets_command() -> None:
    """List the presets: published settings to run with `paragen eval --preset NAME`."""
    from evals.run.presets import describe, load_preset, preset_names

    try:
        for name in preset_names():
            typer.echo(describe(load_preset(name)))
    except ParagenError as exc:
        fail(exc)
