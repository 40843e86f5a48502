"""``paragen serve``: the command. Only typer is imported here; the ASGI stack, the backend
and torch are imported when the command runs, so ``paragen --help`` stays light."""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer

from paragen.cli_options import BackendOpt, BackendOpts, ModelOpt, OtlpOpt, check_otlp_endpoint, validated
from paragen.errors import ConfigError
from paragen.named_backends import NamedBackendOpts, choose_named_backends

_FLAGS = {
    "max_samples_per_request": "max-samples",
    "defaults.temperature": "temperature",
    "defaults.max_tokens": "max-tokens",
    "budget.deadline_s": "deadline",
    "scorers": "scorer",
}


def serve_command(
    backend: BackendOpt = "engine",
    model: ModelOpt = None,
    backend_opt: BackendOpts = [],  # noqa: B006
    named_backend: NamedBackendOpts = [],  # noqa: B006
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on (0: any free port)")] = 8000,
    api_key_env: Annotated[
        str | None,
        typer.Option(help="name of the environment variable holding the API key clients must send"),
    ] = None,
    served_model_name: Annotated[
        list[str], typer.Option(help="name(s) the model is served under (default: from the backend)")
    ] = [],  # noqa: B006
    max_runs: Annotated[
        int, typer.Option(help="runs in flight at once, over all clients (429 past it)")
    ] = 256,
    max_samples: Annotated[int, typer.Option(help="samples one request may ask for (400 past it)")] = 64,
    max_prompt_tokens: Annotated[int, typer.Option(help="longest prompt accepted, in tokens")] = 16384,
    temperature: Annotated[float, typer.Option(help="default sampling temperature")] = 0.7,
    max_tokens: Annotated[int, typer.Option(help="default max tokens per sample")] = 512,
    deadline: Annotated[float | None, typer.Option(help="seconds before any run is cut off")] = None,
    tool_vote: Annotated[
        str,
        typer.Option(help="how majority-N votes over tool calls: name, arguments or hierarchical"),
    ] = "hierarchical",
    scorer: Annotated[
        list[str],
        typer.Option(help="a reward model requests may name as their verifier (repeatable; llm needs none)"),
    ] = [],  # noqa: B006
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "info",
    access_log: Annotated[
        bool, typer.Option(help="log one line per request (method, path, status; never a header)")
    ] = True,
    otlp_endpoint: OtlpOpt = None,
) -> None:
    """Serve an OpenAI-compatible API whose model names pick a strategy (e.g. ffs-8/smollm2)."""
    from paragen.serve.config import ServeConfig
    from paragen.serve.server import bind

    api_key = _api_key(api_key_env)
    named_backends = choose_named_backends(named_backend)  # resolved, not built: nothing loaded yet
    _check_log_level(log_level)
    check_otlp_endpoint(otlp_endpoint)
    config = validated(
        ServeConfig,
        _FLAGS,
        model_names=tuple(served_model_name) or ("pending",),
        api_key=api_key,
        max_runs=max_runs,
        max_samples_per_request=max_samples,
        max_prompt_tokens=max_prompt_tokens,
        defaults={"temperature": temperature, "max_tokens": max_tokens},
        budget={"deadline_s": deadline},
        tool_vote=tool_vote,
        scorers=tuple(scorer),
    )
    sock = bind(host, port)  # before the model loads: a taken port fails at once
    try:
        backend_obj = _backend(backend, model, backend_opt)
        with _tracing(otlp_endpoint):
            _serve(
                (backend_obj, named_backends),
                config,
                sock=sock,
                model=model,
                named=bool(served_model_name),
                logging=(log_level, access_log),
            )
    finally:
        sock.close()


def _serve(
    backends: tuple[Any, Any],
    config: Any,
    *,
    sock: Any,
    model: str | None,
    named: bool,
    logging: tuple[str, bool],
) -> None:
    """Serve the run's backend and the named ones (resolved, built here); the app closes them all."""
    from paragen.backends.base import open_backend
    from paragen.named_backends import build_named, close_backends
    from paragen.serve.app import create_app
    from paragen.serve.server import listen, run_in_foreground, served_model_names, uvicorn_server

    backend, choices = backends

    async def main() -> None:
        others: dict[str, Any] = {}
        try:
            others = await build_named(choices)  # closes those it built if one fails
            for other in others.values():  # probed now, as the served backend is: not at a first request
                await open_backend(other)
            names = config.model_names if named else await served_model_names(backend, model)
        except BaseException:
            await close_backends([backend, *others.values()])
            raise
        app = create_app(backend, config.model_copy(update={"model_names": names}), backends=others)
        host, port = sock.getsockname()[:2]
        listen(sock)
        typer.echo(f"paragen serve: {', '.join(names)} on http://{host}:{port}/v1", err=True)
        log_level, access_log = logging
        await uvicorn_server(app, log_level=log_level, access_log=access_log).serve(sockets=[sock])

    run_in_foreground(main)


def _tracing(endpoint: str | None) -> Any:
    from paragen import tracing

    return tracing.configured(endpoint)  # on where the flag or OTEL_* asks; flushed at shutdown


LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")  # uvicorn's


def _check_log_level(level: str) -> None:
    if level.lower() not in LOG_LEVELS:
        raise ConfigError(f"bad --log-level {level!r}", hint=f"use one of {', '.join(LOG_LEVELS)}")


def _api_key(variable: str | None) -> str | None:
    if variable is None:
        return None
    key = os.environ.get(variable, "").strip()  # a trailing newline (from a file) would never match
    if not key:
        raise ConfigError(
            f"--api-key-env names {variable}, which is not set or empty", hint=f"export {variable}=..."
        )
    return key


def _backend(spec: str, model: str | None, options: list[str]) -> Any:
    from paragen.cli_options import choose_backend

    return choose_backend(spec, model=model, base_url=None, options=options).build()
