"""A throwaway package installed with pip: its strategy is found by name and its command is mounted."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = "pg-throwaway-plugin"

PLUGIN_SOURCE = '''
from paragen import BaseStrategy, StrategyConfig, extract_answer


class ShortestConfig(StrategyConfig):
    n: int = 3


class Shortest(BaseStrategy[ShortestConfig]):
    """Answer with the shortest of n samples."""

    name = "shortest_plugin"
    Config = ShortestConfig

    async def run(self, problem, ctx):
        request = ctx.request(prompt=problem.question)
        async with ctx.fanout(request, n=self.config.n) as fan:
            traces = [t async for t in fan]
        best = min(traces, key=lambda t: t.completion_tokens)
        return ctx.finish(extract_answer(best.text), text=best.text)


def add_commands(app):
    @app.command("hello-plugin")
    def hello() -> None:
        """Say hello from a plugin."""
        print("hello from a plugin")
'''


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "-q", *args], check=True, capture_output=True, timeout=240)


@pytest.fixture(scope="module")
def installed_plugin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    root: Path = tmp_path_factory.mktemp("plugin")
    (root / "pg_throwaway_plugin.py").write_text(PLUGIN_SOURCE)
    (root / "pyproject.toml").write_text(
        textwrap.dedent(f"""
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "{PACKAGE}"
        version = "0.0.1"
        [project.entry-points."paragen.strategies"]
        shortest_plugin = "pg_throwaway_plugin:Shortest"
        [project.entry-points."paragen.commands"]
        hello = "pg_throwaway_plugin:add_commands"
    """)
    )
    _pip("install", "--no-deps", "--no-build-isolation", str(root))
    try:
        yield
    finally:
        _pip("uninstall", "-y", PACKAGE)


def _paragen(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from paragen.cli import main; main(sys.argv[1:])"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


def test_plugin_is_listed_and_runs_by_name(installed_plugin: None) -> None:
    listing = _paragen("strategies")
    assert listing.returncode == 0, listing.stderr
    assert "shortest_plugin" in listing.stdout
    fields = _paragen("strategies", "shortest_plugin")
    assert fields.returncode == 0, fields.stderr
    assert "n (3)" in fields.stdout
    run = _paragen("run", "What is 2 + 3?", "-s", "shortest_plugin", "-b", "scripted", "--json")
    assert run.returncode == 0, run.stderr
    assert '"strategy": "shortest_plugin"' in run.stdout
    assert '"answer": "5"' in run.stdout or '"answer": "6"' in run.stdout


def test_plugin_commands_are_mounted_like_the_harness(installed_plugin: None) -> None:
    listing = _paragen("--help")
    assert listing.returncode == 0, listing.stderr
    # the harness's own commands arrive by the same entry-point group as the plugin's
    assert all(name in listing.stdout for name in ("hello-plugin", "eval", "report")), listing.stdout
    hello = _paragen("hello-plugin")
    assert hello.returncode == 0, hello.stderr
    assert hello.stdout.strip() == "hello from a plugin"
