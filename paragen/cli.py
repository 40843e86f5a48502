"""The ``paragen`` command line: run, strategies, backends, serve, model (and eval/report, by entry point).

Every mistake of the user's (a bad name, flag, config, an unreachable server) ends
in one line on stderr naming what is wrong and what to do, and exit code 2. Heavy
libraries (torch, vllm) are imported only when a backend that needs them is built.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from paragen._cli_model import model_app
from paragen.cli_options import (
    BackendOpt,
    BackendOpts,
    BaseUrlOpt,
    DeadlineOpt,
    MaxTokensOpt,
    MaxTotalTokensOpt,
    ModelOpt,
    OtlpOpt,
    SeedOpt,
    StrategyOpts,
    TemperatureOpt,
    check_otlp_endpoint,
    check_out_file,
    choose_backend,
    count_option,
    parse_strategy_options,
    validated,
)
from paragen.config import Budget
from paragen.errors import ParagenError
from paragen.registry import BACKEND_GROUP, COMMAND_GROUP, STRATEGY_GROUP, load, names
from paragen.serve.cli import serve_command
from paragen.signals import Terminated

app = typer.Typer(
    name="paragen",
    help="Parallel test-time reasoning for LLMs: strategies, backends, evals.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # Help texts are plain text: in rich markup "needs paragen[otel]" would print as "needs paragen".
    rich_markup_mode=None,
)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("paragen")
    except PackageNotFoundError:  # run from a source tree that was never installed
        from paragen import __version__

        return __version__


def _print_version(value: bool) -> None:
    if value:
        print(f"paragen {_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="print paragen's version and exit", callback=_print_version, is_eager=True
        ),
    ] = False,
) -> None:
    """Parallel test-time reasoning for LLMs: strategies, backends, evals."""


@app.command()
def run(
    question: Annotated[str, typer.Argument(help="the problem to solve")],
    strategy: Annotated[str, typer.Option("--strategy", "-s", help="strategy name")] = "majority",
    n: Annotated[
        int | None, typer.Option("-n", "--n", help="samples (the strategy's n; hogwild: its workers)")
    ] = None,
    strategy_opt: StrategyOpts = [],  # noqa: B006
    backend: BackendOpt = "engine",
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    backend_opt: BackendOpts = [],  # noqa: B006
    temperature: TemperatureOpt = 0.7,
    max_tokens: MaxTokensOpt = 512,
    seed: SeedOpt = 0,
    max_total_tokens: MaxTotalTokensOpt = None,
    deadline: DeadlineOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the whole result as JSON")] = False,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="also write the result as JSON to this file")
    ] = None,
    otlp_endpoint: OtlpOpt = None,
) -> None:
    """Answer QUESTION with a strategy; print the answer, the traces and the accounting."""
    from paragen._cli_run import cli_problem, execute_run
    from paragen.strategy import build_strategy
    from paragen.types import SamplingParams

    options = parse_strategy_options(strategy_opt, [strategy])[strategy]
    if n is not None:
        options[count_option(strategy)] = n
    sampling = validated(SamplingParams, temperature=temperature, max_tokens=max_tokens, seed=seed)
    budget = validated(Budget, max_total_tokens=max_total_tokens, deadline_s=deadline)
    chosen = build_strategy(strategy, options)
    problem = cli_problem(question)
    if out is not None:
        check_out_file(out)
    check_otlp_endpoint(otlp_endpoint)
    backend_obj = choose_backend(backend, model=model, base_url=base_url, options=backend_opt).build()
    execute_run(
        problem,
        chosen,
        backend=backend_obj,
        sampling=sampling,
        budget=budget,
        as_json=as_json,
        out=out,
        otlp_endpoint=otlp_endpoint,
    )


@app.command("strategies")
def list_strategies(
    name: Annotated[
        str | None, typer.Argument(help="show this strategy's config fields (-O KEY=VALUE)")
    ] = None,
) -> None:
    """List the installed strategies, one line each; with NAME, that strategy's config fields."""
    from paragen._cli_listing import list_plugins, show_plugin

    if name is None:
        list_plugins(STRATEGY_GROUP, "strategies")
    else:
        show_plugin(STRATEGY_GROUP, name, "-O")


@app.command("backends")
def list_backends(
    name: Annotated[
        str | None, typer.Argument(help="show this backend's options (--backend-opt KEY=VALUE)")
    ] = None,
) -> None:
    """List the installed backends, one line each; with NAME, that backend's options."""
    from paragen._cli_listing import list_plugins, show_plugin

    if name is None:
        list_plugins(BACKEND_GROUP, "backends")
    else:
        show_plugin(BACKEND_GROUP, name, "--backend-opt")


app.command("serve")(serve_command)
app.add_typer(model_app, name="model")


_mounted: set[str] = set()


def _mount_commands() -> None:
    """Add the commands of "paragen.commands" plugins (the eval harness: eval, report), once each."""
    for name in names(COMMAND_GROUP):
        if name in _mounted:
            continue
        _mounted.add(name)
        try:
            add_commands = load(COMMAND_GROUP, name)
        except ParagenError:  # a plugin that cannot be imported must not take the core's commands down
            continue
        add_commands(app)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, turning every user error into one line and exit code 2."""
    _mount_commands()
    try:
        # standalone_mode=False: click returns a command's typer.Exit code instead of exiting.
        code = app(args=argv, standalone_mode=False)
    except typer.Exit as exc:
        code = getattr(exc, "exit_code", 0)
    except typer.Abort:
        code = 130
    except typer.TyperException as exc:  # usage errors: unknown flag, missing argument, bad type
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        print(f"paragen: {message}", file=sys.stderr)
        code = 2
    except ParagenError as exc:
        print(f"paragen: {exc.one_line()}", file=sys.stderr)
        code = 2
    except Terminated as exc:
        print(f"paragen: {exc}", file=sys.stderr)
        code = Terminated.exit_code
    if isinstance(code, int) and code:
        sys.exit(code)


if __name__ == "__main__":
    main()
