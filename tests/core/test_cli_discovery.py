"""What a newcomer types first: ``--version``, the plugin listings, and ``--help`` of every command."""

from __future__ import annotations

import re
from importlib.metadata import version
from typing import TYPE_CHECKING

import pytest
import typer
from typer.core import TyperGroup

if TYPE_CHECKING:
    from typer._click import Command

from paragen._cli_listing import description
from paragen.cli import _mount_commands, app, main
from paragen.registry import BACKEND_GROUP, STRATEGY_GROUP, load, names

BRACKETED = re.compile(r"\[[^\[\]]*\]")


def _paragen(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    main(argv)  # returns on exit code 0; any other code is SystemExit, failing the test
    return capsys.readouterr().out


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert _paragen(["--version"], capsys) == f"paragen {version('paragen')}\n"


@pytest.mark.parametrize(("command", "group"), [("strategies", STRATEGY_GROUP), ("backends", BACKEND_GROUP)])
def test_listing_is_one_line_per_plugin_with_its_description(
    command: str, group: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    lines = _paragen([command], capsys).splitlines()
    assert all(len(line) <= 100 for line in lines), max(lines, key=len)
    rows = lines[:-1]
    assert [row.split()[0] for row in rows] == sorted(names(group))
    for row in rows:
        name, shown = row.split(maxsplit=1)
        full = description(load(group, name))
        assert full, f"{name} has no description (a docstring's first line, or `description`)"
        assert full.startswith(shown.removesuffix("...")), (name, shown)


def test_one_strategy_lists_its_fields_one_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    lines = _paragen(["strategies", "hogwild"], capsys).splitlines()
    fields = load(STRATEGY_GROUP, "hogwild").Config.model_fields
    assert lines[0].startswith("hogwild: Workers")
    assert [line.split()[0] for line in lines[2:]] == list(fields)
    assert all(len(line) < 100 for line in lines[2:]), "a long default (the prompts) is shortened"


def test_description_prefers_the_attribute_and_never_inherits_a_docstring() -> None:
    class Base:
        """Base's summary."""

    class Described(Base):
        """Docstring summary."""

        description = "Its own line."

    class Plain(Base):
        """Run ``n`` samples, like :class:`Base`
        does, on two lines.

        Details nobody lists.
        """

    class Bare(Base):
        pass

    assert description(Described) == "Its own line."
    assert description(Plain) == "Run `n` samples, like Base does, on two lines."
    assert description(Bare) == ""


def _commands() -> dict[str, Command]:
    _mount_commands()
    root = typer.main.get_command(app)
    assert isinstance(root, TyperGroup)
    return {"": root, **root.commands}


def _help_texts(command: Command) -> list[str]:
    texts = [command.help or ""]
    texts += [getattr(param, "help", None) or "" for param in command.params]
    return texts


@pytest.mark.parametrize("name", sorted(_commands()))
def test_help_shows_every_bracketed_text_of_its_source(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Rich markup would take `[otel]` in "needs paragen[otel]" for a style and print "needs paragen"."""
    command = _commands()[name]
    shown = " ".join(_paragen([name, "--help"] if name else ["--help"], capsys).split())
    wanted = [m for text in _help_texts(command) for m in BRACKETED.findall(" ".join(text.split()))]
    missing = [text for text in wanted if text not in shown]
    assert not missing, f"`paragen {name} --help` lost {missing}"


def test_help_check_sees_the_otel_extra() -> None:
    """The check above has something to find: the run command's --otlp-endpoint help names paragen[otel]."""
    assert "[otel]" in " ".join(_help_texts(_commands()["run"]))
