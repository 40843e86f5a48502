"""`paragen merge` and `paragen eval --procs`: the commands' side of sharded sweeps (evals.run.shards)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from paragen.cli_options import check_out_folder, fail
from paragen.errors import ConfigError, ParagenError
from paragen.signals import until_terminated

if TYPE_CHECKING:
    from evals.run.procs import Child
    from evals.run.ray_launcher import RayLaunch
    from evals.run.records import EvalRecord
    from evals.run.shards import Shard


# Options a --procs child does not take from its parent: it gets its own folder, shard and quiet output.
_PARENT_ONLY = frozenset({"out", "procs", "shard", "progress", "plot", "launcher", "ray_address", "ray_gpus"})


def child_options(ctx: typer.Context) -> list[str]:
    """The parent's eval options as a command line for its children (``--procs``), defaults included."""
    args: list[str] = []
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        if param.param_type_name != "option" or param.name in _PARENT_ONLY or value is None:
            continue
        if getattr(param, "is_flag", False):
            args.append(param.opts[0] if value else param.secondary_opts[0])
            continue
        flag = next((o for o in param.opts if o.startswith("--")), param.opts[0])
        for item in value if param.multiple else [value]:
            args += [flag, str(item)]
    return args


def run_procs(
    ctx: typer.Context,
    out: Path,
    procs: int,
    outer: Shard | None,
    *,
    resume: bool,
    launch: RayLaunch | None = None,
) -> list[EvalRecord]:
    """Run the sweep as ``procs`` shard processes (here, or as Ray tasks where ``launch`` is given),
    merge their folders into ``out``; its records."""
    import anyio

    from evals.run.merge import merge_shards
    from evals.run.procs import SHARDS_FOLDER, failed_child, plan_children, run_children
    from evals.run.records import RUN_FILE, load_records

    if (out / RUN_FILE).exists() and not resume:
        hint = "pass --resume to continue it, or pick a new --out"
        raise ConfigError(f"{out} already holds a run", hint=hint)
    if launch is None:
        children = plan_children(child_options(ctx), out, procs, outer)
        typer.echo(f"{procs} shard processes; their folders and logs: {out / SHARDS_FOLDER}", err=True)
        codes = anyio.run(until_terminated, lambda: run_children(children))
    else:
        children = _ray_children(ctx, out, procs, outer, resume=resume)
        codes = _run_on_ray(children, launch)
    failed = failed_child(children, codes)
    if failed is not None:
        typer.echo(f"paragen: {failed[0]}", err=True)
        raise typer.Exit(failed[1])
    merge_shards(out, [child.out for child in children], partial=outer is not None, replace=True)
    return load_records(out).latest()


def _ray_children(
    ctx: typer.Context, out: Path, procs: int, outer: Shard | None, *, resume: bool
) -> list[Child]:
    """The children of ``--launcher ray``: absolute folders (they run on other nodes) and always
    ``--resume``, so a retried task goes on from its records; shard folders of an earlier sweep are
    refused without ``--resume``, as a folder of an earlier run is."""
    from evals.run.procs import SHARDS_FOLDER, plan_children
    from evals.run.records import RUN_FILE

    shards = out.resolve() / SHARDS_FOLDER
    if not resume and shards.is_dir() and any(shards.glob(f"*/{RUN_FILE}")):
        raise ConfigError(
            f"{shards} holds shards of a run", hint="pass --resume to continue them, or pick a new --out"
        )
    options = ["--resume" if option == "--no-resume" else option for option in child_options(ctx)]
    return plan_children(options, out.resolve(), procs, outer)


def _run_on_ray(children: list[Child], launch: RayLaunch) -> dict[Shard, int]:
    import anyio
    import ray

    from evals.run.ray_launcher import connect, run_tasks

    node = connect(launch.address)
    try:
        where = children[0].out.parent
        typer.echo(
            f"{len(children)} shards as Ray tasks on {launch.address}; folders and logs: {where}", err=True
        )
        typer.echo(f"this driver is on node {node}: its tasks fail if that node dies", err=True)
        return anyio.run(until_terminated, lambda: run_tasks(children, launch))
    finally:
        ray.shutdown()  # the driver leaves; the cluster stays


def merge_command(
    out: Annotated[Path, typer.Argument(help="the merged run folder to write (new, or empty)")],
    shards: Annotated[list[Path], typer.Argument(help="the shards' run folders (paragen eval --shard I/N)")],
    partial: Annotated[
        bool, typer.Option(help="merge the shards given even if others are missing (merge the rest later)")
    ] = False,
) -> None:
    """Join the run folders of one sweep's shards into one run folder, checked complete."""
    from evals.run.merge import merge_shards
    from evals.run.records import load_records

    try:
        check_out_folder(out)
        info = merge_shards(out, shards, partial=partial)
    except ParagenError as exc:
        fail(exc)
        return
    held = info.shard.indices if info.shard else []
    count = info.shard.count if info.shard else 1
    typer.echo(f"{len(load_records(out).records)} records of shards {_held(held)} of {count} in {out}")


def _held(indices: list[int]) -> str:
    return ",".join(str(i) for i in indices)
