"""`make results` (``python -m evals.report.results``): a results page regenerated from fresh engine runs.

Runs the built-in strategies with the in-process engine over the tasks in TASKS (synthetic
arithmetic at every difficulty level, the bundled GSM8K slice, the bundled MATH-500 slice; a task
of size 0 is skipped), under each seed of ``--seeds``, then writes the page: the machine, model,
commit and data hashes, the live tables (with each setting's wall seconds per problem), accuracy by
level, the paired comparisons against single and against majority, the budget tables and the
Pareto plots (PNG beside the page).

The model is SmolLM2-135M-Instruct (docs/results.md, the default) or ``--model SPEC``: a model
installed with ``paragen model install NAME`` or a GGUF path; its page is docs/results-NAME.md,
its plots docs/results/NAME-TASK.png, its runs runs/results-NAME-SIZE, and the header names its
quantisation, origin and license (evals.report.results_page, where its paragraph is edited).

What runs is one table, ROWS: every built-in strategy that makes sense on math with the engine,
with its options and which n values it runs at (EXCLUDED says why the others are left out; a test
checks that every registered strategy is in one or the other). Its size is a parameter:
``--size default``, ``--size small`` (a smoke test of a few minutes, labelled as such on the
page) or ``--size capable`` (for a model that solves GSM8K and MATH-500 problems); every count can
also be set alone. Runs go to ``--runs`` and are resumed when the command is run again with the
same settings.

The default takes about 50 minutes on 2 CPU cores (docs/evals.md); the page states its own runs'
wall time and machine. ``hogwild_text`` is left out for its cost (EXCLUDED).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from evals.report.render import budget_cells, md_table, paired_cells, table_cells
from evals.report.results_page import (
    ROOT,
    PageModel,
    describe_model,
    header,
    listed,
    model_key,
    wall_per_problem,
)
from paragen.errors import ParagenError


@dataclass(frozen=True)
class TaskPlan:
    """One task of the page. ``every_row``: each row at its n values; else (long answers, costly on a
    CPU) only the rows marked ``long_tasks``, each at its largest n."""

    name: str
    title: str
    every_row: bool
    by_level: bool  # its problems carry a difficulty level: a table of accuracy by level


TASKS = (
    TaskPlan("arith", "arith", every_row=True, by_level=True),
    TaskPlan("gsm8k", "GSM8K", every_row=False, by_level=False),
    TaskPlan("math500", "MATH-500", every_row=False, by_level=True),
)
# Per preset: each task's problem count (0: skipped) and max tokens, the n values and the seeds.
PRESETS: dict[str, dict[str, Any]] = {
    "default": {"arith": 10, "gsm8k": 4, "math500": 0, "n": "4,8", "seeds": "0,1",
                "arith_tokens": 192, "gsm8k_tokens": 320, "math500_tokens": 512},
    "small": {"arith": 5, "gsm8k": 1, "math500": 0, "n": "2,4", "seeds": "0,1",
              "arith_tokens": 48, "gsm8k_tokens": 64, "math500_tokens": 64},
    # For a model that solves most arith levels (make results-qwen), sized from measured wall s/problem
    # so that it runs in under an hour on 2 AVX2 cores (results_page.QWEN_SIZES says how).
    "capable": {"arith": 40, "gsm8k": 0, "math500": 0, "n": "8", "seeds": "0",
                "strategies": "single,majority,ffs,deepconf,best_of_n",
                "arith_tokens": 256, "gsm8k_tokens": 400, "math500_tokens": 512},
}  # fmt: skip
TOKENS = "<the task's max tokens>"  # an option value replaced by the task's --TASK-tokens


@dataclass(frozen=True)
class Row:
    """One strategy of the page: its options, which of ``--n`` it runs at, and whether the
    long-answer tasks (those not ``every_row``: GSM8K, MATH-500) too."""

    name: str
    ns: Literal["all", "min", "max"] = "all"  # every --n value, the smallest, or the largest
    options: dict[str, Any] = field(default_factory=dict)
    long_tasks: bool = False  # at the row's largest n only: their answers are long on a CPU
    min_n: int = 1  # n values below it are skipped (its config refuses them), e.g. k=3 needs n >= 3


# Every registered strategy is a row or in EXCLUDED (tests/evals/test_results_page.py checks it).
# Options fit SmolLM2-135M's short answers without thinking tags; the cheap samplers run at every
# n, ffs_k / lfs_k (k=3 <= n) at the largest, the multi-round ones at the smallest.
SEARCH: dict[str, Any] = {"m": 2, "max_depth": 6, "step_max_tokens": 64}
ROWS = (
    Row("single", long_tasks=True),
    Row("majority", long_tasks=True),
    Row("best_of_n", long_tasks=True),
    Row("adaptive_consistency", "max"),
    Row(
        "budget_forcing",
        options={
            "mode": "extend",
            "waits": 1,
            "think_tokens": TOKENS,
            "answer_tokens": 24,
            "think_close": "",
        },
    ),
    Row("nothinking"),
    Row("ffs", long_tasks=True),
    Row("ffs_k", "max", min_n=3),
    Row("lfs_k", "max", min_n=3),
    Row("deepconf", options={"eta": 50, "window": 32}),
    Row("deepconf_online", "max", {"eta": 50, "window": 32, "n_init": 4, "batch": 4}),
    Row("deepprune", "max", {"judge": "lexical", "truncation": "words", "k2": 3, "k3": 3}),
    Row("dynasor", options={"interval": 32}, long_tasks=True),
    # Parallel-Probe's rounds scaled to answers of a few dozen tokens (paper: every 500 of ~30k).
    Row("parallel_probe", options={"interval": 16, "stable": 2, "patience": 2, "warmup": 1}),
    Row("cisc"),
    Row("self_certainty"),
    Row("pdr", "min"),
    Row("sr"),
    Row("rsa", "min", {"k": 2, "t": 1}),
    # Read the samples: one reading pass (genselect), pairwise games (tournament), two deliberations.
    Row("genselect", "min"),
    Row("tournament", "min"),
    Row("heavy", "min", {"summary_k": 2}),
    Row("hogwild", "min"),
    # Verifier-guided search with the LLM-as-verifier (no reward model can be downloaded here):
    # 2 beams x 2 expansions at n = 4, steps of at most 64 tokens, 6 deep.
    Row("weighted_bon", "min"),
    Row("beam_search", "min", SEARCH),
    Row("dvts", "min", SEARCH),
    Row("particle_filtering", "min", {k: v for k, v in SEARCH.items() if k != "m"}),
)
EXCLUDED = {
    "llmcompiler": "a tool-use planner (it plans calls to the calculator, python and lookup tools): "
    "on arithmetic it would measure the tools, not test-time reasoning over samples",
    "react": "the same tool-use setting as llmcompiler, one tool call per step",
    "hogwild_text": "Hogwild!'s text approximation for backends without a shared KV cache; on the engine "
    "the real `hogwild` runs, and the approximation re-reads every worker's view each round: about "
    "100 s a problem on 2 CPU cores, a third of the hour for one setting",
    "passthrough": "what `paragen serve` runs for a plain model name: the question sampled once with no "
    "solve prompt and no answer extracted (single is that baseline)",
    "forkjoin": "an executor for models trained to write a fork/join grammar (ThreadWeaver's "
    "`<Outlines>`): SmolLM2 never writes one, so every run would be a single sample",
    "tool_vote": "what `paragen serve` runs for majority-N with tools: a vote over tool calls, and "
    "these tasks offer no tools",
    "verify_refine": "a proof loop (a grader's report and a verdict per verification, acceptance "
    "after 5 passing ones in a row, up to 30 iterations): on arithmetic with a short boxed answer "
    "a vote settles what it would verify, at up to 90 calls a problem",
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", default=None, help="an installed model's name or a GGUF path (default: SmolLM2)"
    )
    parser.add_argument("--size", choices=sorted(PRESETS), default="default")
    for task in TASKS:
        parser.add_argument(
            f"--{task.name}", type=int, default=None, help=f"{task.title} problems (0: skipped)"
        )
        parser.add_argument(f"--{task.name}-tokens", dest=f"{task.name}_tokens", type=int, default=None)
    parser.add_argument("--n", default=None, help="comma-separated n values")
    parser.add_argument("--seeds", default=None, help="comma-separated sampling seeds")
    parser.add_argument(
        "--strategies", default=None, help="comma-separated rows to run (default: every row of ROWS)"
    )
    parser.add_argument(
        "--runs", type=Path, default=None, help="run folders (default: runs/results[-MODEL]-SIZE)"
    )
    parser.add_argument("--page", type=Path, default=None, help="default: docs/results[-MODEL].md")
    parser.add_argument("--assets", type=Path, default=ROOT / "docs" / "results", help="the plots' folder")
    parser.add_argument("--note", default="", help="a line about this run, printed under the header")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    for key, value in PRESETS[args.size].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    name = model_key(args.model)
    suffix = f"-{name}" if name else ""
    args.runs = args.runs or ROOT / "runs" / f"results{suffix}-{args.size}"
    args.page = args.page or ROOT / "docs" / f"results{suffix}.md"
    args.plot_prefix = f"{name}-" if name else ""  # docs/results/NAME-TASK.png beside SmolLM2's TASK.png
    return args


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def sweep(task: TaskPlan, args: argparse.Namespace, backend: Any, backend_spec: str) -> Path:
    """One task's sweep under every seed (resumed if its folder holds records of the same settings)."""
    import anyio

    from evals.run.runner import run_eval
    from evals.run.spec import BackendSetup, EvalSpec, RunFolder, Sampling
    from evals.tasks import Selection, get_task, load_task
    from paragen.config import Budget
    from paragen.types import SamplingParams

    spec_task = get_task(task.name)
    loaded = load_task(spec_task, Selection(limit=getattr(args, task.name)), source="bundled")
    out = args.runs / task.name
    seeds = _ints(args.seeds)
    one_seed = seeds[0] if len(seeds) == 1 else None
    max_tokens = getattr(args, f"{task.name}_tokens")
    spec = EvalSpec(
        task=spec_task, problems=loaded.problems, data=loaded.source, combos=combos_for(task.name, args),
        backend=BackendSetup(backend_spec), folder=RunFolder(out, resume=(out / "records.jsonl").exists()),
        sampling=Sampling(SamplingParams(max_tokens=max_tokens, temperature=0.7, seed=one_seed),
                          seeds=seeds if len(seeds) > 1 else [], budget=Budget(deadline_s=300.0)),
    )  # fmt: skip
    anyio.run(run_eval, spec, backend)
    return Path(out)


def task_plan(name: str) -> TaskPlan:
    return next(task for task in TASKS if task.name == name)


def combos_for(task: str, args: argparse.Namespace) -> list[Any]:
    """The settings of ``task``: each row at its n values, or (a long-answer task) the rows marked
    ``long_tasks`` at their largest n only."""
    from evals.run.combos import build_combos

    plan = task_plan(task)
    ns, tokens = _ints(args.n), getattr(args, f"{task}_tokens")
    picked = {"all": ns, "min": ns[:1], "max": ns[-1:]}
    combos = []
    for row in chosen_rows(args):
        if not plan.every_row and not row.long_tasks:
            continue
        row_ns = [n for n in (picked[row.ns] if plan.every_row else picked[row.ns][-1:]) if n >= row.min_n]
        if not row_ns:
            continue
        options = {key: tokens if value == TOKENS else value for key, value in row.options.items()}
        combos += build_combos([row.name], row_ns, {row.name: options})
    return combos


def chosen_rows(args: argparse.Namespace) -> list[Row]:
    """The rows of ``--strategies`` (every row when it is not given), in ROWS' order."""
    if args.strategies is None:
        return list(ROWS)
    wanted = {name.strip() for name in args.strategies.split(",") if name.strip()}
    return [row for row in ROWS if row.name in wanted]


def unknown_rows(args: argparse.Namespace) -> list[str]:
    names = [name.strip() for name in (args.strategies or "").split(",") if name.strip()]
    return [name for name in names if name not in {row.name for row in ROWS}]


def planned(args: argparse.Namespace) -> list[TaskPlan]:
    """The tasks that run: those with at least one problem."""
    return [task for task in TASKS if getattr(args, task.name) > 0]


def run_all(args: argparse.Namespace, backend: Any, backend_spec: str) -> dict[str, Path]:
    return {task.name: sweep(task, args, backend, backend_spec) for task in planned(args)}


def by_level(run: Path) -> tuple[list[str], list[list[str]]]:
    """Accuracy of each setting at each difficulty level (records pooled over seeds)."""
    from evals.run.records import load_records

    cells: dict[str, dict[int, list[bool]]] = {}
    for r in load_records(run).latest():
        level = int(r.problem.meta.get("level", 0))
        cells.setdefault(f"{r.strategy} n={r.n}", {}).setdefault(level, []).append(r.grade.correct)
    levels = sorted({lv for row in cells.values() for lv in row})
    body = [[name] + [_frac(row.get(lv, [])) for lv in levels] for name, row in cells.items()]
    return ["setting", *(f"level {lv}" for lv in levels)], body


def _frac(hits: list[bool]) -> str:
    return f"{sum(hits) / len(hits):.0%} ({sum(hits)}/{len(hits)})" if hits else "-"


def live_table(rows: list[dict[str, Any]], run: Path) -> str:
    """The live summary with each setting's wall seconds per problem beside its latencies."""
    header, body = table_cells(rows)
    walls = wall_per_problem(run)
    at = header.index("lat p95 s") + 1
    header.insert(at, "wall s/problem")
    for row, cells in zip(rows, body, strict=True):
        wall = walls.get((row["strategy"], row["n"], row["settings_id"]))
        cells.insert(at, "-" if wall is None else f"{wall:.2f}")
    return md_table(header, body)


def task_section(task: TaskPlan, run: Path, args: argparse.Namespace, model: PageModel) -> list[str]:
    from evals.report.build import build_report
    from evals.report.plots import plot_pareto

    largest = f"majority n={_ints(args.n)[-1]}"
    single = build_report(run, baseline="single")
    against_majority = build_report(run, baseline=largest)
    plot = plot_pareto(
        single["summary"],
        args.assets / f"{args.plot_prefix}{task.name}.png",
        title=f"{task.name}: {model.label} on the engine",
    )
    parts = [f"## {task.name}", live_table(single["summary"], run)]
    if task.by_level:
        parts += ["Accuracy by difficulty level (all seeds pooled):", md_table(*by_level(run))]
    parts += ["Paired against single:", md_table(*paired_cells(single["paired"]))]
    parts += [f"Paired against {largest}:", md_table(*paired_cells(against_majority["paired"]))]
    if single["within_budget"]:
        budgets = one_bank(single["within_budget"], largest)
        parts += [f"Best accuracy within a budget (live, and replayed from the bank of {largest}):"]
        parts += [md_table(*budget_cells(budgets))]
    parts += [f"![{task.name} Pareto plots]({os.path.relpath(plot, args.page.parent)})"]
    parts += [f"Notes: {'; '.join(single['notes'])}"] if single["notes"] else []
    return parts


def one_bank(rows: list[dict[str, Any]], bank: str) -> list[dict[str, Any]]:
    """The budget rows with the live columns and one bank's replays (every bank's is too wide a page)."""
    keep = {"task", "axis", "budget"}
    return [
        {
            k: v
            for k, v in row.items()
            if k in keep or k.startswith("live ") or k.endswith(f"(bank of {bank})")
        }
        for row in rows
    ]


def settings(args: argparse.Namespace) -> list[str]:
    """What ran: each strategy's n values, options and tasks, and the strategies left out, with why."""
    tasks = planned(args)
    ns: dict[str, list[str]] = {}
    for combo in combos_for(TASKS[0].name, args):  # the first task runs every row at its n values
        ns.setdefault(combo.name, []).append(str(combo.n))
    body = [
        [
            f"`{row.name}`",
            ",".join(ns.get(row.name, [f"- (needs n >= {row.min_n})"])),
            _options(row.options),
            ", ".join(t.title for t in tasks if t.every_row or row.long_tasks) or "-",
        ]
        for row in chosen_rows(args)
    ]
    left_out = "; ".join(f"`{name}`: {why}" for name, why in EXCLUDED.items())
    not_run = [f"`{row.name}`" for row in ROWS if row not in chosen_rows(args)]
    if not_run:  # --strategies: the page says which rows this invocation skipped, not why they fail
        left_out += f"; not run in this invocation (`--strategies`): {', '.join(not_run)}"
    long_ones = [t.title for t in tasks if not t.every_row]
    return [
        "**Settings**"
        + (f" (on {listed(long_ones)} a strategy runs at its largest n only):" if long_ones else ":"),
        "",
        md_table(["strategy", "n", "options", "tasks"], body),
        "",
        f"Left out: {left_out}.",
    ]


def _options(options: dict[str, Any]) -> str:
    shown = [
        f"{key}={'the max tokens' if value == TOKENS else repr(value)}" for key, value in options.items()
    ]
    return ", ".join(shown) or "defaults"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    from evals.run.local_model import ModelUnavailable, make_backend

    if not planned(args):
        print("make results: every task has 0 problems; nothing to run", file=sys.stderr)
        return 2
    if unknown_rows(args) or (args.strategies is not None and not chosen_rows(args)):
        names = ", ".join(unknown_rows(args)) or "none"
        print(f"make results: --strategies names no row of the page ({names}); rows: "
              + ", ".join(row.name for row in ROWS), file=sys.stderr)  # fmt: skip
        return 2
    started = time.monotonic()
    try:
        model = describe_model(args.model)  # before loading: a model asked for but missing is one line
        backend, backend_spec = make_backend(args.model)
        runs = run_all(args, backend, backend_spec)
        dtype = str(getattr(getattr(backend, "engine", None), "dtype", "?")).replace("torch.", "")
        wall = time.monotonic() - started
        sections = [
            part for task in planned(args) for part in task_section(task, runs[task.name], args, model)
        ]
    except ModelUnavailable as exc:
        print(f"make results: {exc}", file=sys.stderr)
        return 2 if args.model else 1  # a model asked for by name is a usage error, as in the CLI
    except ParagenError as exc:
        print(exc.one_line(), file=sys.stderr)
        return 2
    args.page.parent.mkdir(parents=True, exist_ok=True)
    sizes = [(t.title, getattr(args, t.name), getattr(args, f"{t.name}_tokens")) for t in planned(args)]
    top = header(args, runs, model, dtype, wall, sizes=sizes, settings_lines=settings(args))
    text = "\n".join(top) + "\n\n" + "\n\n".join(sections) + "\n"
    partial = args.page.with_name(f".{args.page.name}.partial")
    partial.write_text(text)
    os.replace(partial, args.page)  # a reader never sees half a page
    print(f"{args.page} written ({wall / 60:.1f} min of runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
