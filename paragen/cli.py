"""The ``paragen`` command line: run, strategies, backends (and eval/report from evals).

Every mistake of the user's (a bad name, flag, config, an unreachable server) ends
in one line on stderr naming what is wrong and what to do, and exit code 2. Heavy
libraries (torch, vllm) are imported only when a backend that needs them is built.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from paragen.config import Budget, parse_backend_spec
from paragen.errors import ConfigError, ParagenError
from paragen.registry import BACKEND_GROUP, STRATEGY_GROUP, load, names
from paragen.serve.cli import serve_command

app = typer.Typer(
    name="paragen",
    help="Parallel test-time reasoning for LLMs: strategies, backends, evals.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def parse_options(pairs: list[str], what: str) -> dict[str, Any]:
    """``key=value`` pairs into a dict; values are parsed as JSON when they parse, else kept as text."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"bad {what} {pair!r}", hint="write KEY=VALUE, e.g. temperature=0.6")
        try:
            options[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            options[key.strip()] = raw
    return options


def build_backend(spec: str, *, model: str | None, base_url: str | None, options: dict[str, Any]) -> Any:
    """A backend from a ``kind[:target]`` spec plus the common --model/--base-url flags."""
    kind, target = parse_backend_spec(spec)
    if base_url is not None:
        if kind != "openai":
            raise ConfigError(
                "--base-url is for the openai backend", hint=f"the {kind} backend takes a target"
            )
        target = target or base_url
    cls = load(BACKEND_GROUP, kind)
    if model is not None:
        if kind == "engine":
            target = target or model
        else:
            options = {**options, "model": model}
    return cls.from_spec(target, **options)


BackendOpt = Annotated[str, typer.Option("--backend", "-b", help="KIND[:TARGET], e.g. engine, openai:URL")]
ModelOpt = Annotated[str | None, typer.Option("--model", "-m", help="model name (server) or path (engine)")]
BaseUrlOpt = Annotated[str | None, typer.Option("--base-url", help="OpenAI-compatible server URL")]
BackendOpts = Annotated[list[str], typer.Option("--backend-opt", help="backend option KEY=VALUE")]


@app.command()
def run(
    question: Annotated[str, typer.Argument(help="the problem to solve")],
    strategy: Annotated[str, typer.Option("--strategy", "-s", help="strategy name")] = "majority",
    n: Annotated[int | None, typer.Option("-n", help="samples (the strategy's n)")] = None,
    backend: BackendOpt = "engine",
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    opt: Annotated[list[str], typer.Option("--opt", "-o", help="strategy option KEY=VALUE")] = [],  # noqa: B006
    backend_opt: BackendOpts = [],  # noqa: B006
    temperature: Annotated[float, typer.Option(help="sampling temperature")] = 0.7,
    max_tokens: Annotated[int, typer.Option(help="max tokens per sample")] = 512,
    seed: Annotated[int | None, typer.Option(help="base seed (sample i uses seed+i)")] = 0,
    max_total_tokens: Annotated[int | None, typer.Option(help="token budget of the run")] = None,
    deadline: Annotated[float | None, typer.Option(help="seconds before the run is cut off")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the whole result as JSON")] = False,
    out: Annotated[Path | None, typer.Option(help="also write the result as JSON to this file")] = None,
) -> None:
    """Answer QUESTION with a strategy; print the answer, the traces and the accounting."""
    from paragen.cli_run import execute_run

    options = parse_options(opt, "--opt")
    if n is not None:
        options["n"] = n
    sampling = _sampling(temperature=temperature, max_tokens=max_tokens, seed=seed)
    budget = _validated(Budget, max_total_tokens=max_total_tokens, deadline_s=deadline)
    backend_obj = build_backend(
        backend, model=model, base_url=base_url, options=parse_options(backend_opt, "--backend-opt")
    )
    execute_run(question, strategy, options, backend_obj, sampling, budget, as_json=as_json, out=out)


def _sampling(**values: Any) -> Any:
    from paragen.types import SamplingParams

    return _validated(SamplingParams, **values)


def _validated(model: Any, **values: Any) -> Any:
    from pydantic import ValidationError

    try:
        return model(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"bad value for {field.replace('_', '-')}: {err['msg']}") from None


@app.command("strategies")
def list_strategies() -> None:
    """List the installed strategies and their config fields."""
    _list_plugins(STRATEGY_GROUP, lambda obj: getattr(obj, "Config", None))


@app.command("backends")
def list_backends() -> None:
    """List the installed backends (importing each to show its options)."""
    _list_plugins(BACKEND_GROUP, lambda obj: getattr(obj, "Config", None))


app.command("serve")(serve_command)


def _list_plugins(group: str, config_of: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table("name", "config fields (default)")
    for name in names(group):
        try:
            config = config_of(load(group, name))
        except ParagenError as exc:
            table.add_row(name, f"[dim]unavailable: {exc.message}[/dim]")
            continue
        fields = getattr(config, "model_fields", {})
        described = (f"{k} ({v.get_default(call_default_factory=True)!r})" for k, v in fields.items())
        table.add_row(name, ", ".join(described) or "-")
    Console().print(table)


def _mount_evals() -> None:
    try:
        from evals.cli import register
    except ImportError:  # the harness is optional for the core
        return
    register(app)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, turning every user error into one line and exit code 2."""
    _mount_evals()
    try:
        app(args=argv, standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(getattr(exc, "exit_code", 0))
    except typer.Abort:
        sys.exit(130)
    except typer.TyperException as exc:  # usage errors: unknown flag, missing argument, bad type
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        print(f"paragen: {message}", file=sys.stderr)
        sys.exit(2)
    except ParagenError as exc:
        print(f"paragen: {exc.one_line()}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
