"""`python -m evals.demo` (what `make demo` runs): the harness end to end on the embedded default model.

Runs arith and a GSM8K slice with several strategies on the in-process engine
(SmolLM2-135M-Instruct on CPU), prints the tables and writes the Pareto plots. If the
model cannot be loaded it stops with one line saying why and exit code 1: the demo's
numbers are a language model's or there are none (no scripted stand-in).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from evals.run.local_model import ModelUnavailable, make_backend
from paragen.backends.base import Backend
from paragen.config import Budget
from paragen.errors import ConfigError, ParagenError
from paragen.registry import STRATEGY_GROUP, names, register
from paragen.types import SamplingParams

WANTED = ("single", "majority", "ffs")
console = Console()


def _register_builtin(name: str) -> bool:
    """Register a built-in strategy whose entry point is missing (said aloud, never silently)."""
    import importlib

    try:
        module = importlib.import_module(f"strategies.{name}")
    except ImportError:
        return False
    for obj in vars(module).values():
        if isinstance(obj, type) and getattr(obj, "name", None) == name:
            register(STRATEGY_GROUP, name, obj)
            console.print(f"[yellow]{name}: no entry point installed; registered from strategies/{name}.py")
            return True
    return False


def pick_strategies(wanted: list[str]) -> list[str]:
    for name in set(wanted) - set(names(STRATEGY_GROUP)):
        _register_builtin(name)
    available = set(names(STRATEGY_GROUP))
    chosen = [s for s in wanted if s in available]
    skipped = [s for s in wanted if s not in available]
    if skipped:
        console.print(f"[yellow]skipping strategies that are not registered: {', '.join(skipped)}")
    if not chosen:
        raise ConfigError(
            "none of the demo strategies is registered", hint="pip install -e . to refresh entry points"
        )
    return chosen


def run_task(
    task_name: str,
    limit: int,
    strategies: list[str],
    ns: list[int],
    backend: Backend,
    spec: str,
    out: Path,
    max_tokens: int,
) -> dict[str, Any]:
    import anyio

    from evals.report.build import build_report, print_report
    from evals.report.plots import plot_pareto
    from evals.run.combos import build_combos
    from evals.run.runner import run_eval
    from evals.run.spec import BackendSetup, EvalSpec, RunFolder, Sampling
    from evals.tasks import Selection, get_task, load_task

    task = get_task(task_name)
    loaded = load_task(task, Selection(limit=limit), source="bundled")
    problems = loaded.problems
    spec_obj = EvalSpec(
        task=task,
        problems=problems,
        data=loaded.source,
        combos=build_combos(strategies, ns),
        backend=BackendSetup(spec),
        folder=RunFolder(out),
        sampling=Sampling(
            SamplingParams(max_tokens=max_tokens, temperature=0.7),
            budget=Budget(deadline_s=90.0),  # a stuck problem is recorded as "deadline", the demo goes on
        ),
    )
    started = time.monotonic()
    anyio.run(run_eval, spec_obj, backend)
    console.print(f"{task_name}: {len(problems)} problems in {time.monotonic() - started:.0f} s")
    report = build_report(out)
    print_report(report, console)
    plot = plot_pareto(report["summary"], out / "pareto.png", title=f"{task_name} on {spec}")
    console.print(f"plot: {plot}")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=f"runs/demo-{time.strftime('%Y%m%d-%H%M%S')}")
    parser.add_argument("--arith", type=int, default=16, help="arith problems")
    parser.add_argument("--gsm8k", type=int, default=4, help="GSM8K problems (0 skips it)")
    parser.add_argument("--n", default="4,8")
    parser.add_argument("--strategies", default=",".join(WANTED))
    parser.add_argument("--max-tokens", type=int, default=192)
    parser.add_argument("--model", default=None, help="engine model (default: SmolLM2-135M-Instruct)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # the demo runs on bundled copies
    if console.width < 150 and not console.is_terminal:
        console.width = 200
    try:
        backend, spec = make_backend(args.model)
        strategies = pick_strategies([s.strip() for s in args.strategies.split(",") if s.strip()])
        ns = [int(n) for n in args.n.split(",")]
        out = Path(args.out)
        run_task("arith", args.arith, strategies, ns, backend, spec, out / "arith", args.max_tokens)
        if args.gsm8k:
            gsm_strategies = [s for s in strategies if s in ("single", "majority")] or strategies[:1]
            run_task("gsm8k", args.gsm8k, gsm_strategies, ns[-1:], backend, spec, out / "gsm8k", 320)
    except ModelUnavailable as exc:
        print(f"make demo: {exc}", file=sys.stderr)
        return 1
    except ParagenError as exc:
        print(exc.one_line(), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
