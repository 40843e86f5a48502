"""`paragen eval`: run a sweep of strategies x n-values over a task, recording every problem as it finishes.

    paragen eval -t arith -s single,majority,ffs -n 1,4,8 --backend engine --limit 30 --out runs/NAME

The flags it shares with `paragen run` are defined once, in paragen.cli_options; what they ask for
becomes an EvalSpec in evals.run.settings.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from evals.cli.merge import run_procs
from evals.cli.report import show_report
from paragen import tracing
from paragen.cli_options import (
    BackendChoice,
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
    check_out_folder,
    choose_backend,
    fail,
    parse_strategy_options,
    split_commas,
    unique,
    validated,
)
from paragen.config import Budget
from paragen.errors import ConfigError, ParagenError
from paragen.signals import until_terminated
from paragen.types import SamplingParams

if TYPE_CHECKING:
    from evals.run.records import EvalRecord
    from evals.run.spec import EvalSpec
    from evals.tasks import LoadedTask, Selection, Task
    from evals.tasks.loading import SourceChoice

EXIT_NO_RESULT = 1  # no problem got a result: every record is a backend error
EXIT_FAILED = 3  # some problem's run raised (a bug): recorded as "failed", the sweep went on


def parse_ns(text: str) -> list[int]:
    try:
        ns = [int(part) for part in split_commas(text)]
    except ValueError:
        raise ConfigError(
            f"bad --n {text!r}", hint="give positive integers separated by commas, e.g. 1,4,8"
        ) from None
    if not ns or any(n <= 0 for n in ns):
        raise ConfigError(f"bad --n {text!r}", hint="give positive integers separated by commas, e.g. 1,4,8")
    return ns


def parse_seeds(text: str | None, seed: int | None) -> list[int]:
    """``--seeds 0,1,2`` as a list (one seed is the same as ``--seed``); not both flags."""
    if text is None:
        return []
    if seed is not None:
        raise ConfigError("--seed and --seeds contradict each other", hint="give one of them")
    hint = "give seeds separated by commas, e.g. 0,1,2"
    try:
        values = [int(part) for part in split_commas(text)]
    except ValueError:
        raise ConfigError(f"bad --seeds {text!r}", hint=hint) from None
    if not values or any(v < 0 for v in values):
        raise ConfigError(f"bad --seeds {text!r}", hint=hint)
    for value in values:
        validated(SamplingParams, seed=value)
    return unique(values, "--seeds")


def _at_least(value: int | None, least: int, flag: str) -> None:
    if value is not None and value < least:
        raise ConfigError(f"bad {flag} {value}: it must be at least {least}")


def eval_command(
    ctx: typer.Context,
    out: Annotated[
        Path, typer.Option("--out", "-o", help="run folder for records.jsonl, run.json and plots")
    ],
    strategies: Annotated[
        str, typer.Option("-s", "--strategies", "--strategy", help="comma-separated strategy names")
    ] = "single",
    ns: Annotated[
        str | None,
        typer.Option(
            "-n",
            "--n",
            help="comma-separated n values: samples, or hogwild's workers "
            "(default: 1 sample; hogwild and hogwild_text: their 2 workers)",
        ),
    ] = None,
    strategy_opt: StrategyOpts = [],  # noqa: B006
    backend: BackendOpt = "engine",
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    backend_opt: BackendOpts = [],  # noqa: B006
    limit: Annotated[int | None, typer.Option(help="at most this many problems (at least 1)")] = None,
    offset: Annotated[int, typer.Option(help="skip this many problems first")] = 0,
    ids: Annotated[str, typer.Option(help="comma-separated problem ids")] = "",
    shuffle: Annotated[
        int | None,
        typer.Option("--shuffle", metavar="SEED", help="shuffle the problems with this seed first"),
    ] = None,
    seed: SeedOpt = None,
    seeds: Annotated[
        str | None,
        typer.Option(help="comma-separated sampling seeds: the sweep runs once per seed into this run"),
    ] = None,
    resume: Annotated[bool, typer.Option(help="continue a run folder, skipping what is recorded")] = False,
    max_concurrent: Annotated[int, typer.Option(help="problems in flight at once")] = 8,
    max_tokens: MaxTokensOpt = 512,
    temperature: TemperatureOpt = 0.7,
    deadline: DeadlineOpt = None,
    max_total_tokens: MaxTotalTokensOpt = None,
    question_field: Annotated[str | None, typer.Option(help="user data: field with the question")] = None,
    answer_field: Annotated[str | None, typer.Option(help="user data: field with the gold answer")] = None,
    id_field: Annotated[str | None, typer.Option(help="user data: field with the problem id")] = None,
    grading: Annotated[
        str | None, typer.Option(help="answer extraction: auto, boxed, answer_is, last_number")
    ] = None,
    split: Annotated[str, typer.Option(help="user hub data: split")] = "train",
    revision: Annotated[
        str | None,
        typer.Option(help="hub revision (commit, branch or tag) to read the task at, in place of its pin"),
    ] = None,
    offline: Annotated[bool, typer.Option(help="use bundled copies, never the hub")] = False,
    hub: Annotated[bool, typer.Option(help="use the hub copy or fail (no bundled fallback)")] = False,
    new_run: Annotated[
        bool, typer.Option(help="with --resume: record changed settings as a new run in the same folder")
    ] = False,
    fail_fast: Annotated[
        bool, typer.Option(help="stop at the first problem whose run raised (it is recorded first)")
    ] = False,
    progress: Annotated[bool, typer.Option(help="show the progress bar")] = True,
    plot: Annotated[
        bool | None,
        typer.Option(help="write pareto.png beside the records (default: when matplotlib is installed)"),
    ] = None,
    otlp_endpoint: OtlpOpt = None,
    task: Annotated[
        str | None,
        typer.Option("-t", "--task", help="a built-in task (`paragen presets` lists them), a file, or hf:ID"),
    ] = None,
    prompt: Annotated[
        str | None,
        typer.Option(
            help="prompt template: a name (paragen, matharena, matharena-aime, deepseek-r1, "
            "qwen25-math-cot) or a file (default: the task's)"
        ),
    ] = None,
    top_p: Annotated[float | None, typer.Option("--top-p", help="nucleus sampling top-p")] = None,
    preset: Annotated[
        str | None,
        typer.Option(help="a published setting by name (`paragen presets`); flags given override it"),
    ] = None,
    shard: Annotated[
        str | None,
        typer.Option(metavar="I/N", help="run only shard I of N of the sweep (merge them: paragen merge)"),
    ] = None,
    procs: Annotated[
        int | None,
        typer.Option(metavar="P", help="run the sweep as P shard processes here, then merge them into --out"),
    ] = None,
) -> None:
    """Run a sweep of strategies x n-values over a task, recording every problem as it finishes."""
    from evals.cli.presets import preset_over
    from evals.report.plots import INSTALL_HINT, MISSING, can_plot, require_plotting
    from evals.run.combos import build_combos
    from evals.run.prompts import get_template
    from evals.run.shards import parse_shard
    from evals.run.spec import EvalSpec
    from evals.tasks import at_revision, get_task

    try:
        chosen_preset, preset_record, over = preset_over(ctx, preset)
        task, strategies, ns = over.get("task", task), over.get("strategies", strategies), over.get("ns", ns)
        seeds, limit, prompt = over.get("seeds", seeds), over.get("limit", limit), over.get("prompt", prompt)
        max_tokens, temperature = over.get("max_tokens", max_tokens), over.get("temperature", temperature)
        top_p, split = over.get("top_p", top_p), over.get("split", split)
        question_field, answer_field = (
            over.get("question_field", question_field),
            over.get("answer_field", answer_field),
        )
        id_field, revision = over.get("id_field", id_field), over.get("revision", revision)
        if task is None:
            raise ConfigError("no task given", hint="pass -t TASK, or --preset NAME")
        template = None if prompt is None else get_template(prompt)
        task_obj = get_task(task, question=question_field, answer=answer_field, id_field=id_field,
                            grading=grading, split=split)  # fmt: skip
        if revision is not None:
            task_obj = at_revision(task_obj, revision)
        shard_part = None if shard is None else parse_shard(shard)
        _at_least(procs, 1, "--procs")
        names = unique(split_commas(strategies), "--strategies")
        selection = _selection(limit, offset, ids, shuffle)
        _at_least(max_concurrent, 1, "--max-concurrent")
        seed_list = parse_seeds(seeds, seed)
        n_list = None if ns is None else unique(parse_ns(ns), "--n")
        chosen = choose_backend(backend, model=model, base_url=base_url, options=backend_opt)
        options = parse_strategy_options(strategy_opt, names)
        if chosen_preset is not None:  # the preset's options, under any given with --strategy-opt
            preset_options = chosen_preset.strategy_options()
            options = {name: {**preset_options.get(name, {}), **options.get(name, {})} for name in names}
        one_seed = seed_list[0] if len(seed_list) == 1 else seed
        top = {} if top_p is None else {"top_p": top_p}
        sampling = validated(
            SamplingParams, max_tokens=max_tokens, temperature=temperature, seed=one_seed, **top
        )
        budget = validated(Budget, deadline_s=deadline, max_total_tokens=max_total_tokens)
        source = _data_source(offline, hub, revision)
        check_otlp_endpoint(otlp_endpoint)
        check_out_folder(out)
        if plot:
            require_plotting()
        # Every strategy at every n before a problem is loaded or a file written: a configuration that
        # cannot run (ffs_k with k > n) stops the sweep before it starts.
        combos = build_combos(names, n_list, options)
        loaded = _problems(task_obj, selection, source)
        spec = EvalSpec(
            task=task_obj,
            problems=loaded.problems,
            combos=combos,
            out=out,
            backend_spec=chosen.shown,
            data=loaded.source,
            backend_options=chosen.options,
            resume=resume,
            new_run=new_run,
            max_concurrent=max_concurrent,
            sampling=sampling,
            budget=budget,
            seed=shuffle or 0,
            seeds=seed_list if len(seed_list) > 1 else [],
            progress=progress,
            fail_fast=fail_fast,
            shard=shard_part,
            prompt=template,
            preset=preset_record,
        )
        if procs is None:
            records = run_sweep(spec, chosen, otlp_endpoint=otlp_endpoint)
        else:
            records = run_procs(ctx, out, procs, shard_part, resume=resume or new_run)
    except ParagenError as exc:
        fail(exc)
        return
    typer.echo(f"{len(records)} records in {out / 'records.jsonl'}")
    if not records and shard_part is not None:  # more shards than units: this one has nothing to run
        typer.echo(f"shard {shard_part} owns no problem of this sweep; its run.json is kept for the merge")
        return
    draw = can_plot() if plot is None else plot
    if plot is None and not draw:
        typer.echo(f"no plot: {MISSING} ({INSTALL_HINT})", err=True)
    show_report(out, fmt="table", do_regrade=False, plot=draw)
    _end_of_run(records)


def _selection(limit: int | None, offset: int, ids: str, shuffle: int | None) -> Selection:
    from evals.tasks import Selection

    _at_least(limit, 1, "--limit")
    _at_least(offset, 0, "--offset")
    return Selection(
        limit=limit, offset=offset, ids=split_commas(ids), shuffle=shuffle is not None, seed=shuffle or 0
    )


def _problems(task: Task, selection: Selection, source: SourceChoice) -> LoadedTask:
    """The task's problems after ``selection``, saying where they came from when that needs saying."""
    from evals.tasks import load_task

    loaded = load_task(task, selection, source=source)
    if loaded.source.note:
        typer.echo(f"data: {loaded.source.describe()} ({loaded.source.note})", err=True)
    return loaded


def _data_source(offline: bool, hub: bool, revision: str | None) -> SourceChoice:
    if offline and hub:
        raise ConfigError("--offline and --hub contradict each other", hint="give one of them")
    if offline and revision is not None:
        raise ConfigError(
            "--revision and --offline contradict each other",
            hint="--revision asks the hub for that revision; --offline never uses the hub",
        )
    return "bundled" if offline else "hub" if hub else "auto"


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
    spec: EvalSpec, backend: BackendChoice, *, otlp_endpoint: str | None = None
) -> list[EvalRecord]:
    """Build the backend and run the sweep of ``spec``; its records in input order."""
    import anyio

    from evals.run.runner import run_eval

    built = backend.build()

    async def main() -> list[EvalRecord]:
        try:
            return await run_eval(spec, built)
        finally:
            await built.aclose()

    with tracing.configured(otlp_endpoint):  # flushed before the command returns
        return anyio.run(until_terminated, main)
