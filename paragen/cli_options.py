"""The flags `paragen run` and `paragen eval` share, defined once so that one flag means one thing.

    -s/--strategy        strategy name(s)             -n/--n          samples or workers (eval: list)
    -O/--strategy-opt    [STRATEGY.]KEY=VALUE         -b/--backend    KIND[:TARGET]
    --backend-opt        KEY=VALUE                    -m/--model      --base-url
    --seed               sampling seed                --temperature   --max-tokens
    --max-total-tokens   --deadline                   -o/--out        where the result goes

Option values are read against the type of the field they set: a text field keeps the
text as given (``api_key=12345678`` stays a string), any other field reads it as JSON
when it parses (``n=4``, ``tools=["python"]``) and as text otherwise, so pydantic's
validation names the field when the value is wrong.
"""

from __future__ import annotations

import json
import tempfile
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn, Union, get_args, get_origin

import typer
from pydantic import SecretStr

from paragen import tracing
from paragen.config import parse_backend_spec
from paragen.errors import ConfigError, ParagenError, invalid_fields

if TYPE_CHECKING:
    from paragen.backends.base import Backend

SEED_HELP = (
    "sampling seed sent with every request; the n samples of one request get distinct seeds derived "
    "from it (seed+i over HTTP, a hash of seed and i in the engine), so the same seed repeats a run "
    "on a backend that honours seeds"
)

StrategyOpts = Annotated[
    list[str],
    typer.Option(
        "--strategy-opt",
        "-O",
        metavar="[STRATEGY.]KEY=VALUE",
        help="strategy option [STRATEGY.]KEY=VALUE (without STRATEGY: every chosen strategy)",
    ),
]
BackendOpt = Annotated[str, typer.Option("--backend", "-b", help="KIND[:TARGET], e.g. engine, openai:URL")]
ModelOpt = Annotated[str | None, typer.Option("--model", "-m", help="model name (server) or path (engine)")]
BaseUrlOpt = Annotated[str | None, typer.Option("--base-url", help="OpenAI-compatible server URL")]
BackendOpts = Annotated[
    list[str], typer.Option("--backend-opt", metavar="KEY=VALUE", help="backend option KEY=VALUE")
]
TemperatureOpt = Annotated[float, typer.Option("--temperature", help="sampling temperature")]
MaxTokensOpt = Annotated[int, typer.Option("--max-tokens", help="max tokens per sample")]
MaxTotalTokensOpt = Annotated[
    int | None, typer.Option("--max-total-tokens", help="token budget of one problem's run")
]
# --sample-seed is eval's older name of the same flag.
SeedOpt = Annotated[int | None, typer.Option("--seed", "--sample-seed", help=SEED_HELP)]
DeadlineOpt = Annotated[
    float | None, typer.Option("--deadline", "--deadline-s", help="seconds before a problem's run is cut off")
]


OtlpOpt = Annotated[
    str | None,
    typer.Option(
        "--otlp-endpoint",
        help="export OpenTelemetry traces to this OTLP/HTTP endpoint, e.g. http://localhost:4318 "
        "(or set OTEL_EXPORTER_OTLP_ENDPOINT; needs paragen[otel])",
    ),
]


def fail(exc: ParagenError) -> NoReturn:
    """A command's bad input or setting: its one line on stderr (prefixed ``paragen:``, as every
    command's error), and exit code 2."""
    typer.echo(f"paragen: {exc.one_line()}", err=True)
    raise typer.Exit(2)


def split_commas(text: str) -> list[str]:
    """A comma-separated option's values, blanks dropped."""
    return [part.strip() for part in text.split(",") if part.strip()]


def check_otlp_endpoint(endpoint: str | None) -> None:
    """The flag's endpoint, or the OTEL_* one where tracing is turned on by the environment."""
    if endpoint is not None or tracing.wanted_by_environment():
        tracing.check_endpoints(endpoint)


def validated(model: Any, flags: Mapping[str, str] | None = None, /, **values: Any) -> Any:
    """``model(**values)``, or one ConfigError naming the flag of the first bad value: ``flags[field]``,
    else the field's name with dashes."""
    from pydantic import ValidationError

    try:
        return model(**values)
    except ValidationError as exc:
        first = invalid_fields(exc)[0]
        flag = (flags or {}).get(first.field, first.field.replace("_", "-"))
        raise ConfigError(f"bad value for --{flag}: {first.message}") from None


def parse_pairs(items: Sequence[str], flag: str) -> list[tuple[str, str]]:
    """``KEY=VALUE`` items as (key, raw text) pairs; one named error for a malformed item."""
    pairs = []
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"bad {flag} {item!r}", hint="write KEY=VALUE, e.g. temperature=0.6")
        pairs.append((key.strip(), raw))
    return pairs


def typed_value(raw: str, annotation: Any) -> Any:
    """``raw`` read for a field of type ``annotation``: text for text fields, JSON where it parses."""
    if _wants_text(annotation):
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def _wants_text(annotation: Any) -> bool:
    if annotation is None:
        return False
    args = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
    kinds = [a for a in args if a is not type(None)]
    return bool(kinds) and all(_is_text(a) for a in kinds)


def _is_text(kind: Any) -> bool:
    if get_origin(kind) is Literal:
        return all(isinstance(v, str) for v in get_args(kind))
    return kind in (str, SecretStr, Path)


def typed_options(pairs: Sequence[tuple[str, str]], config: Any) -> dict[str, Any]:
    """Pairs read against ``config``'s fields (a pydantic model class; None: JSON where it parses)."""
    fields: Mapping[str, Any] = getattr(config, "model_fields", {}) or {}
    options = {}
    for key, raw in pairs:
        field = fields.get(key)
        options[key] = typed_value(raw, field.annotation if field is not None else None)
    return options


def parse_strategy_options(items: Sequence[str], strategies: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``-O`` items per chosen strategy: ``NAME.KEY=V`` sets NAME's field, ``KEY=V`` sets it for all.

    A NAME that is not among ``strategies`` is refused, not ignored: the user meant something.
    """
    from paragen.registry import load_strategy
    from paragen.strategy import count_field

    grouped: dict[str, dict[str, Any]] = {name: {} for name in strategies}
    for key, raw in parse_pairs(items, "--strategy-opt"):
        name, dot, field = key.rpartition(".")
        if dot and not field:
            raise ConfigError(f"bad strategy option {key!r}", hint="the form is [STRATEGY.]KEY=VALUE")
        targets = [name] if dot else list(strategies)
        for target in targets:
            if target not in grouped:
                raise ConfigError(
                    f"strategy option {key!r} names {target!r}, which is not among the chosen strategies",
                    hint=f"chosen: {', '.join(strategies)}",
                )
            cls = load_strategy(target)
            # One way to set the count (n, or hogwild's workers): else an eval's --n would override it.
            if field in ("n", count_field(cls)):
                hint = "e.g. -n 8, or -n 1,4,8"
                raise ConfigError(f"strategy option {key!r}: {target}'s {field} is set with -n", hint=hint)
            config = getattr(cls, "Config", None)
            grouped[target].update(typed_options([(field, raw)], config))
    return grouped


def count_option(strategy: str) -> str:
    """The config field ``-n`` sets for ``strategy`` (``n``; hogwild's ``workers``); refused if none."""
    from paragen.registry import load_strategy
    from paragen.strategy import count_field

    field = count_field(load_strategy(strategy))
    if field is None:
        raise ConfigError(
            f"strategy {strategy!r} has no n, so -n does not apply to it",
            hint="drop -n; `paragen strategies` lists its config fields",
        )
    return field


def unique(values: Sequence[Any], flag: str) -> list[Any]:
    """``values`` refused when one repeats: a repeated name or n would count its records twice."""
    seen: set[Any] = set()
    for value in values:
        if value in seen:
            raise ConfigError(f"{flag} lists {value!r} twice", hint="give each value once")
        seen.add(value)
    return list(values)


@dataclass(frozen=True)
class BackendChoice:
    """A backend resolved from the flags but not built yet (building may load a model)."""

    plugin: Any
    target: str | None
    options: dict[str, Any]
    shown: str  # the spec as it may be printed and recorded: never a credential in it

    def build(self) -> Backend:
        backend: Backend = self.plugin.from_spec(self.target, **self.options)
        return backend


def choose_backend(
    spec: str, *, model: str | None, base_url: str | None, options: Sequence[str]
) -> BackendChoice:
    """``KIND[:TARGET]`` plus --model/--base-url/--backend-opt, checked, values read against the
    backend's Config; credentials in a URL become the backend's api_key and leave the shown spec."""
    from paragen.registry import load_backend, resolve_backend

    kind, _ = parse_backend_spec(spec)
    config = getattr(load_backend(kind), "Config", None)
    values = typed_options(parse_pairs(options, "--backend-opt"), config)
    plugin, target, values = resolve_backend(spec, values, model=model, base_url=base_url)
    return BackendChoice(plugin, target, values, kind if target is None else f"{kind}:{target}")


def check_out_file(out: Path) -> None:
    """Refuse, before any work, a result file that cannot be written (nothing is left behind)."""
    _refuse_option_like(out, "--out")
    if out.is_dir():
        raise ConfigError(f"cannot write {out}: it is a folder", hint="give a file name")
    if not out.parent.is_dir():
        raise ConfigError(f"cannot write {out}: {out.parent} is not an existing folder")
    _probe_writable(out.parent, f"cannot write {out}")


def check_out_folder(out: Path) -> None:
    """Refuse, before any work, a run folder that cannot be made or written (nothing is left behind)."""
    _refuse_option_like(out, "--out")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"cannot use {out} as the run folder: it is a file", hint="give a folder")
    ancestor = out
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ConfigError(f"cannot create {out}: {ancestor} is a file", hint="give a folder path")
    _probe_writable(ancestor, f"cannot create {out}" if ancestor != out else f"cannot write into {out}")


def _probe_writable(folder: Path, what: str) -> None:
    # Trying is the only sure test (root passes os.access; read-only mounts and /proc do not).
    try:
        Path(tempfile.mkdtemp(dir=folder, prefix=".paragen-probe-")).rmdir()
    except OSError as exc:
        raise ConfigError(f"{what}: {exc.strerror or exc}") from None


def _refuse_option_like(out: Path, flag: str) -> None:
    # `-o` once meant a strategy option in `run`: `-o n=4` must not quietly write a file "n=4".
    if "=" in out.name and not out.exists():
        raise ConfigError(
            f"{flag} {str(out)!r} looks like an option, not a path",
            hint="strategy options are -O KEY=VALUE",
        )
