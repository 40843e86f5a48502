"""Second backends named on the command line: ``--named-backend NAME=KIND[:TARGET]`` (eval and serve).

A strategy reads with one by name (``-O genselect.reader=judge``), as the Python API's
``Orchestrator(backend, backends={"judge": ...})`` gives it. Each spec is resolved here, before
any model loads, the way ``--backend`` is (an unknown kind is refused at once; credentials in a
URL become the backend's api_key and leave the shown spec); :func:`built_backends` builds them
and closes every one it built, whatever happens.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Collection, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated

import anyio
import typer

from paragen.cli_options import BackendChoice, choose_backend
from paragen.config import spec_without_credentials
from paragen.errors import ConfigError, ParagenError

if TYPE_CHECKING:
    from paragen.backends.base import Backend
    from paragen.strategy import Strategy

FLAG = "--named-backend"
NamedBackendOpts = Annotated[
    list[str],
    typer.Option(
        FLAG,
        metavar="NAME=KIND[:TARGET]",
        help="a second backend strategies may read with by NAME (e.g. -O genselect.reader=NAME); repeatable",
    ),
]
# A name as a strategy option writes it: no blanks, no "=" (it ends the name), nothing shell-hostile.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_HINT = "write NAME=KIND[:TARGET], e.g. judge=openai:http://localhost:8001/v1"


def choose_named_backends(items: Sequence[str]) -> dict[str, BackendChoice]:
    """``NAME=SPEC`` items resolved (not built), each name once; one named error for a bad item."""
    chosen: dict[str, BackendChoice] = {}
    for item in items:
        name, sep, spec = item.partition("=")
        # Shown without credentials: a malformed item may still hold a key in its URL.
        shown = f"{name}{sep}{spec_without_credentials(spec)}" if sep else spec_without_credentials(item)
        if not sep or not _NAME.fullmatch(name) or not spec.strip():
            raise ConfigError(f"bad {FLAG} {shown!r}", hint=_HINT)
        if name in chosen:
            raise ConfigError(f"{FLAG} names {name!r} twice", hint="give each name once")
        try:
            chosen[name] = choose_backend(spec, model=None, base_url=None, options=[])
        except ParagenError as exc:
            raise ConfigError(f"{FLAG} {name}: {exc.message}", hint=exc.hint) from None
    return chosen


def check_readers(strategies: Iterable[Strategy], names: Collection[str]) -> None:
    """Refuse, before any model loads, a strategy whose ``reader`` names a backend not given."""
    from paragen.orchestrator import check_reader

    for strategy in strategies:
        reader = getattr(strategy.config, "reader", None)
        check_reader(strategy, names, hint=f"give {FLAG} {reader}=KIND[:TARGET], or drop the reader option")


def shown_specs(choices: Mapping[str, BackendChoice]) -> dict[str, str]:
    """Each name's spec as it may be printed and recorded (never a credential)."""
    return {name: choice.shown for name, choice in choices.items()}


async def build_named(choices: Mapping[str, BackendChoice]) -> dict[str, Backend]:
    """Every named backend built; when one fails, those built before it are closed first."""
    built: dict[str, Backend] = {}
    try:
        for name, choice in choices.items():
            built[name] = choice.build()
    except BaseException:
        await close_backends(built.values())
        raise
    return built


async def close_backends(backends: Iterable[Backend]) -> None:
    """Close each backend, also while the caller is being cancelled (an engine's thread, a client)."""
    with anyio.CancelScope(shield=True):
        for backend in backends:
            await backend.aclose()


@asynccontextmanager
async def built_backends(choices: Mapping[str, BackendChoice]) -> AsyncIterator[dict[str, Backend]]:
    """The named backends, built for the block and closed when it ends."""
    built = await build_named(choices)
    try:
        yield built
    finally:
        await close_backends(built.values())
