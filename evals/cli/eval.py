"""`paragen eval`: run a sweep of strategies x n-values over a task, recording every problem as it finishes.

    paragen eval -t arith -s single,majority,ffs -n 1,4,8 --backend engine --limit 30 --out runs/NAME

The flags it shares with `paragen run` are defined once, in paragen.cli_options. The command reads
its flags into an evals.run.settings.SweepRequest, lets a preset fill the ones not given, and runs
the EvalSpec that evals.run.settings.build_spec makes of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from evals.cli.merge import run_procs
from evals.cli.report import show_report
from paragen import cli_options as opts
from paragen import tracing
from paragen.cli_options import (
    check_otlp_endpoint,
    check_out_folder,
    choose_backend,
    fail,
    parse_strategy_options,
    split_commas,
    unique,
)
from paragen.errors import ConfigError, ParagenError
from paragen.named_backends import NamedBackendOpts, choose_named_backends
from paragen.signals import until_terminated

if TYPE_CHECKING:
    from evals.run.ray_launcher import RayLaunch
    from evals.run.records import EvalRecord
    from evals.run.settings import SweepRequest
    from evals.run.shards import Shard
    from evals.run.spec import EvalSpec

EXIT_NO_RESULT = 1  # no problem got a result: every record is a backend error
EXIT_FAILED = 3  # some problem's run raised (a bug): recorded as "failed", the sweep went on

OutOpt = Annotated[Path, typer.Option("--out", "-o", help="run folder for records.jsonl, run.json and plots")]
StrategiesOpt = Annotated[
    str, typer.Option("-s", "--strategies", "--strategy", help="comma-separated strategy names")
]
NsOpt = Annotated[
    str | None,
    typer.Option(
        "-n",
        "--n",
        help="comma-separated n values: samples, or hogwild's workers "
        "(default: 1 sample; hogwild and hogwild_text: their 2 workers)",
    ),
]
LimitOpt = Annotated[int | None, typer.Option(help="at most this many problems (at least 1)")]
OffsetOpt = Annotated[int, typer.Option(help="skip this many problems first")]
IdsOpt = Annotated[str, typer.Option(help="comma-separated problem ids")]
ShuffleOpt = Annotated[
    int | None, typer.Option("--shuffle", metavar="SEED", help="shuffle the problems with this seed first")
]
SeedsOpt = Annotated[
    str | None,
    typer.Option(help="comma-separated sampling seeds: the sweep runs once per seed into this run"),
]
ResumeOpt = Annotated[bool, typer.Option(help="continue a run folder, skipping what is recorded")]
MaxConcurrentOpt = Annotated[int, typer.Option(help="problems in flight at once")]
QuestionFieldOpt = Annotated[str | None, typer.Option(help="user data: field with the question")]
AnswerFieldOpt = Annotated[str | None, typer.Option(help="user data: field with the gold answer")]
IdFieldOpt = Annotated[str | None, typer.Option(help="user data: field with the problem id")]
GradingOpt = Annotated[
    str | None, typer.Option(help="answer extraction: auto, boxed, answer_is, last_number")
]
SplitOpt = Annotated[str, typer.Option(help="user hub data: split")]
RevisionOpt = Annotated[
    str | None,
    typer.Option(help="hub revision (commit, branch or tag) to read the task at, in place of its pin"),
]
OfflineOpt = Annotated[bool, typer.Option(help="use bundled copies, never the hub")]
HubOpt = Annotated[bool, typer.Option(help="use the hub copy or fail (no bundled fallback)")]
NewRunOpt = Annotated[
    bool, typer.Option(help="with --resume: record changed settings as a new run in the same folder")
]
FailFastOpt = Annotated[
    bool, typer.Option(help="stop at the first problem whose run raised (it is recorded first)")
]
ProgressOpt = Annotated[bool, typer.Option(help="show the progress bar")]
PlotOpt = Annotated[
    bool | None,
    typer.Option(help="write pareto.png beside the records (default: when matplotlib is installed)"),
]
TaskOpt = Annotated[
    str | None,
    typer.Option("-t", "--task", help="a built-in task (`paragen tasks` lists them), a file, or hf:ID"),
]
PromptOpt = Annotated[
    str | None,
    typer.Option(
        help="prompt template: a name (paragen, proof, matharena, matharena-aime, deepseek-r1, "
        "qwen25-math-cot) or a file (default: the task's)"
    ),
]
TopPOpt = Annotated[float | None, typer.Option("--top-p", help="nucleus sampling top-p")]
PresetOpt = Annotated[
    str | None,
    typer.Option(help="a published setting by name (`paragen presets`); flags given override it"),
]
ShardOpt = Annotated[
    str | None,
    typer.Option(metavar="I/N", help="run only shard I of N of the sweep (merge them: paragen merge)"),
]
JudgeOpt = Annotated[
    list[str],
    typer.Option(
        "--judge",
        metavar="SPEC",
        help="a proof task's judge: a backend spec (KIND[:TARGET]); repeat for several, scores averaged",
    ),
]
ProcsOpt = Annotated[
    int | None,
    typer.Option(metavar="P", help="run the sweep as P shard processes here, then merge them into --out"),
]

LauncherOpt = Annotated[
    str,
    typer.Option(
        metavar="local|ray",
        help="where --procs runs its shards: local (processes here) or ray (tasks on a Ray cluster)",
    ),
]
RayAddressOpt = Annotated[
    str | None,
    typer.Option(
        metavar="ADDRESS",
        help="--launcher ray: the cluster to join (default: RAY_ADDRESS, else the one `ray start` runs here)",
    ),
]
RayGpusOpt = Annotated[
    float | None, typer.Option(metavar="G", help="--launcher ray: GPUs each shard's task takes (default 0)")
]


def parse_ns(text: str) -> list[int]:
    """``--n 1,4,8`` as a list, each positive and given once."""
    from evals.run.settings import N_HINT, checked_ns

    return checked_ns(_whole_numbers(text, "--n", N_HINT), text)


def parse_seeds(text: str | None, seed: int | None) -> list[int]:
    """``--seeds 0,1,2`` as a list (one seed is the same as ``--seed``); not both flags."""
    from evals.run.settings import SEEDS_HINT, checked_seeds

    if text is None:
        return []
    if seed is not None:
        raise ConfigError("--seed and --seeds contradict each other", hint="give one of them")
    return checked_seeds(_whole_numbers(text, "--seeds", SEEDS_HINT), text)


def _whole_numbers(text: str, flag: str, hint: str) -> list[int]:
    """A comma-separated flag's whole numbers, or one line naming the flag."""
    try:
        return [int(part) for part in split_commas(text)]
    except ValueError:
        raise ConfigError(f"bad {flag} {text!r}", hint=hint) from None


def eval_command(
    ctx: typer.Context,
    out: OutOpt,
    strategies: StrategiesOpt = "single",
    ns: NsOpt = None,
    strategy_opt: opts.StrategyOpts = [],  # noqa: B006
    backend: opts.BackendOpt = "engine",
    model: opts.ModelOpt = None,
    base_url: opts.BaseUrlOpt = None,
    backend_opt: opts.BackendOpts = [],  # noqa: B006
    named_backend: NamedBackendOpts = [],  # noqa: B006
    limit: LimitOpt = None,
    offset: OffsetOpt = 0,
    ids: IdsOpt = "",
    shuffle: ShuffleOpt = None,
    seed: opts.SeedOpt = None,
    seeds: SeedsOpt = None,
    resume: ResumeOpt = False,
    max_concurrent: MaxConcurrentOpt = 8,
    max_tokens: opts.MaxTokensOpt = 512,
    temperature: opts.TemperatureOpt = 0.7,
    deadline: opts.DeadlineOpt = None,
    max_total_tokens: opts.MaxTotalTokensOpt = None,
    question_field: QuestionFieldOpt = None,
    answer_field: AnswerFieldOpt = None,
    id_field: IdFieldOpt = None,
    grading: GradingOpt = None,
    split: SplitOpt = "train",
    revision: RevisionOpt = None,
    offline: OfflineOpt = False,
    hub: HubOpt = False,
    new_run: NewRunOpt = False,
    fail_fast: FailFastOpt = False,
    progress: ProgressOpt = True,
    plot: PlotOpt = None,
    otlp_endpoint: opts.OtlpOpt = None,
    task: TaskOpt = None,
    prompt: PromptOpt = None,
    top_p: TopPOpt = None,
    preset: PresetOpt = None,
    shard: ShardOpt = None,
    procs: ProcsOpt = None,
    launcher: LauncherOpt = "local",
    ray_address: RayAddressOpt = None,
    ray_gpus: RayGpusOpt = None,
    judge: JudgeOpt = [],  # noqa: B006
) -> None:
    """Run a sweep of strategies x n-values over a task, recording every problem as it finishes."""
    from evals.run.orphans import exit_with_parent
    from evals.run.procs import check_procs
    from evals.run.ray_launcher import chosen_launch
    from evals.run.settings import SweepRequest, at_least
    from evals.run.shards import parse_shard

    exit_with_parent()  # a --procs child: end with the parent, however it ends
    try:
        shard_part = None if shard is None else parse_shard(shard)
        check_procs(procs, here=launcher == "local")
        ray = chosen_launch(launcher, procs, ray_address, ray_gpus)
        at_least(shuffle, 0, "--shuffle")  # the data's shuffle takes no negative seed
        request = SweepRequest(
            out=out, task=task, strategies=unique(split_commas(strategies), "--strategies"),
            ns=None if ns is None else parse_ns(ns), seeds=parse_seeds(seeds, seed), seed=seed, limit=limit,
            offset=offset, ids=split_commas(ids), shuffle=shuffle, prompt=prompt, max_tokens=max_tokens,
            temperature=temperature, top_p=top_p, deadline=deadline, max_total_tokens=max_total_tokens,
            question_field=question_field, answer_field=answer_field, id_field=id_field, grading=grading,
            split=split, revision=revision, offline=offline, hub=hub, resume=resume, new_run=new_run,
            max_concurrent=max_concurrent, progress=progress, fail_fast=fail_fast, shard=shard_part,
        )  # fmt: skip
        request = _with_preset(ctx, request, preset, strategy_opt)
        chosen = choose_backend(backend, model=model, base_url=base_url, options=backend_opt)
        judges = [choose_backend(spec, model=None, base_url=None, options=[]) for spec in judge]
        request = replace(request, judges=[j.shown for j in judges])
        named = choose_named_backends(named_backend)
        records = _run(
            ctx, request, (chosen, named), judges, otlp_endpoint=otlp_endpoint, plot=plot, procs=(procs, ray)
        )
    except ParagenError as exc:
        fail(exc)
    _after_run(out, records, shard_part, plot)


def _with_preset(
    ctx: typer.Context, request: SweepRequest, name: str | None, strategy_opt: list[str]
) -> SweepRequest:
    """The request with the preset's values in the flags not given, and the -O options read."""
    from dataclasses import replace

    from evals.run.presets import load_preset
    from evals.run.settings import PRESET_FIELDS, with_preset

    if name is not None:
        given = [p for p in (*PRESET_FIELDS, "seed") if _on_command_line(ctx, p)]
        request = with_preset(request, load_preset(name), given)
    # Read against the strategies the sweep runs, which the preset may have named.
    return replace(request, strategy_options=parse_strategy_options(strategy_opt, request.strategies))


def _on_command_line(ctx: typer.Context, param: str) -> bool:
    source = ctx.get_parameter_source(param)
    return source is not None and source.name == "COMMANDLINE"


def _run(
    ctx: typer.Context,
    request: SweepRequest,
    backends: tuple[opts.BackendChoice, dict[str, opts.BackendChoice]],
    judges: list[opts.BackendChoice],
    *,
    otlp_endpoint: str | None,
    plot: bool | None,
    procs: tuple[int | None, RayLaunch | None],
) -> list[EvalRecord]:
    """Check what is left to check, build the spec, and run it here or as ``procs`` shard processes,
    here or as Ray tasks (``backends``: the run's own and the named ones, resolved but not built)."""
    from evals.report.plots import require_plotting
    from evals.run.lock import run_folder_lock
    from evals.run.settings import build_spec

    check_otlp_endpoint(otlp_endpoint)
    check_out_folder(request.out)
    if plot:
        require_plotting()
    backend, named = backends
    spec = build_spec(request, backend, named)
    if spec.data.note:
        typer.echo(f"data: {spec.data.describe()} ({spec.data.note})", err=True)
    with run_folder_lock(request.out):  # one writer per run folder: a second one is refused
        count, ray = procs
        if count is None:
            return run_sweep(spec, backend, otlp_endpoint=otlp_endpoint, named=named, judges=judges)
        resume = request.resume or request.new_run
        return run_procs(ctx, request.out, count, request.shard, resume=resume, launch=ray)


def _after_run(out: Path, records: list[EvalRecord], shard: Shard | None, plot: bool | None) -> None:
    """Say where the records are, show the report (and plot), and set the exit code."""
    from evals.report.plots import INSTALL_HINT, MISSING, can_plot

    typer.echo(f"{len(records)} records in {out / 'records.jsonl'}")
    if not records and shard is not None:  # more shards than units: this one has nothing to run
        typer.echo(f"shard {shard} owns no problem of this sweep; its run.json is kept for the merge")
        return
    draw = can_plot() if plot is None else plot
    if plot is None and not draw:
        typer.echo(f"no plot: {MISSING} ({INSTALL_HINT})", err=True)
    show_report(out, fmt="table", do_regrade=False, plot=draw)
    _end_of_run(records)


def _end_of_run(records: list[EvalRecord]) -> None:
    """Say how many records are not results; exit 3 when a run raised, 1 when no problem got a result."""
    from evals.run.runner import backend_failures, is_backend_error

    line = backend_failures(records)
    if line is None:
        return
    typer.echo(line, err=True)
    if any(r.grade.outcome == "failed" for r in records):
        typer.echo("some problems failed: their records keep the traceback (`failure`)", err=True)
        raise typer.Exit(EXIT_FAILED)
    if all(r.grade.outcome == "error" for r in records):
        hint = "check that the backend is reachable and serves the API"
        if not any(is_backend_error(r) for r in records):
            hint = "every run ended in the strategy's own error (first above)"
        typer.echo(f"no problem got a result: {hint}", err=True)
        raise typer.Exit(EXIT_NO_RESULT)


def run_sweep(
    spec: EvalSpec,
    backend: opts.BackendChoice,
    *,
    otlp_endpoint: str | None = None,
    named: Mapping[str, opts.BackendChoice] | None = None,
    judges: Sequence[opts.BackendChoice] = (),
) -> list[EvalRecord]:
    """Build the backend (the ``named`` ones, and a proof task's judges) and run the sweep of
    ``spec``; its records in input order. Every backend built is closed when the sweep ends,
    however it ends."""
    import anyio

    from evals.run.judging import Judge
    from evals.run.runner import run_eval
    from paragen.named_backends import built_backends

    # A judge that is the sweep's own backend grades with it (one model loaded, not two); the others
    # are built first, so a judge that cannot be built fails before the model loads.
    own = {i: j.build() for i, j in enumerate(judges) if not _same_backend(j, backend)}
    built = backend.build()
    judging = [Judge(j.shown, own.get(i, built)) for i, j in enumerate(judges)]

    async def main() -> list[EvalRecord]:
        try:
            async with built_backends(named or {}) as others:
                return await run_eval(spec, built, judging, backends=others)
        finally:
            for judge in own.values():
                await judge.aclose()
            await built.aclose()

    with tracing.configured(otlp_endpoint):  # flushed before the command returns
        return anyio.run(until_terminated, main)


def _same_backend(one: opts.BackendChoice, other: opts.BackendChoice) -> bool:
    return (one.shown, one.target, one.options) == (other.shown, other.target, other.options)
