"""Parallel-Probe against majority voting at the same n, on the engine: what the early stop saves.

Synthetic arith problems (``evals.tasks.arith``), SmolLM2 on the paragen engine, majority@n and
parallel_probe@n run one after the other over the same problems with the same seeds, so both
start from the same samples. Parallel-Probe's rounds are scaled to a 135M model's short answers
(probes every ``--interval`` tokens instead of the paper's 500; S, P and warmup likewise small).

Per strategy, summed over the problems:

- sequential tokens: each problem's critical path (its longest branch, as read by the run);
- engine steps and engine tokens: the engine's decode/prefill steps while the strategy ran, and
  the tokens those steps computed (probes' included). They, not the traces, say what the rounds
  cost in compute: a branch held at a round's token count is decoded at most 4 steps past it
  before its unread stream stalls it (docs/engine.md);
- total tokens (samples), probe tokens (counted apart), wall time, accuracy.

    python benchmarks/parallel_probe.py --limit 16 --n 8

The last line printed is JSON: the ratios parallel_probe / majority ("sequential_tokens",
"total_tokens", "engine_steps", "engine_tokens", "wall_s"), both accuracies, and the raw sums under "raw".
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import anyio
from ffs_engine import StepClock
from strategy_table import problems

from paragen.answers import equivalent
from paragen.orchestrator import Orchestrator
from paragen.strategy import Strategy
from paragen.types import Problem, SamplingParams, StrategyResult
from strategies.majority import Majority
from strategies.parallel_probe import ParallelProbe


def lineup(args: argparse.Namespace) -> list[tuple[str, Strategy]]:
    rounds = {"interval": args.interval, "stable": args.stable, "patience": args.patience, "warmup": 1}
    rounds["probe_tokens"] = args.probe_tokens
    return [("majority", Majority(n=args.n)), ("parallel_probe", ParallelProbe(n=args.n, **rounds))]


def sums(
    results: list[StrategyResult], probs: list[Problem], engine: tuple[int, int], wall: float
) -> dict[str, Any]:
    """One strategy's sums; ``engine``: the steps and tokens the engine computed meanwhile."""
    correct = [equivalent(r.answer, p.gold or "") for r, p in zip(results, probs, strict=True)]
    return {
        "accuracy": round(sum(correct) / len(results), 3),
        "sequential_tokens": sum(r.usage.sequential_tokens for r in results),
        "total_tokens": sum(r.usage.total_tokens for r in results),
        "probe_tokens": sum(r.usage.probe_tokens for r in results),
        "engine_steps": engine[0],
        "engine_tokens": engine[1],
        "wall_s": round(wall, 1),
        "early_stops": sum(r.metrics.get("stop_round", -1) >= 0 for r in results),
        "dropped": int(sum(r.metrics.get("dropped", 0) for r in results)),
    }


async def main(args: argparse.Namespace) -> None:
    from paragen.backends.engine import EngineBackend

    backend = EngineBackend.from_spec(args.model)
    clock = StepClock(backend)
    sampling = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, seed=args.seed)
    orch = Orchestrator(backend, defaults=sampling, max_concurrent_problems=args.concurrency)
    probs = problems(args.limit, args.seed)
    raw: dict[str, dict[str, Any]] = {}
    for name, strategy in lineup(args):
        before, start = (clock.steps, clock.tokens), time.perf_counter()
        results = await orch.run_many(strategy, probs)
        engine = (clock.steps - before[0], clock.tokens - before[1])
        raw[name] = sums(results, probs, engine, time.perf_counter() - start)
        print(name, json.dumps(raw[name]), flush=True)
    await backend.aclose()
    probe, majority = raw["parallel_probe"], raw["majority"]
    ratios = {
        key: round(probe[key] / majority[key], 3) if majority[key] else None
        for key in ("sequential_tokens", "total_tokens", "engine_steps", "engine_tokens", "wall_s")
    }
    accuracy = {"accuracy_majority": majority["accuracy"], "accuracy_parallel_probe": probe["accuracy"]}
    print(json.dumps({**ratios, **accuracy, "n": args.n, "problems": args.limit, "raw": raw}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--limit", type=int, default=16, help="arith problems")
    parser.add_argument("--n", type=int, default=8, help="branches of both strategies")
    parser.add_argument("--interval", type=int, default=32, help="tokens between probes of a branch")
    parser.add_argument("--probe-tokens", type=int, default=8, help="a probe's answer: a short number here")
    parser.add_argument("--stable", type=int, default=2, help="S: rounds the majority must hold")
    parser.add_argument("--patience", type=int, default=2, help="P: rounds of dissent that drop a branch")
    parser.add_argument("--max-tokens", type=int, default=192)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--concurrency", type=int, default=4, help="problems in flight")
    parser.add_argument("--model", default=None, help="engine model spec (default: SmolLM2)")
    anyio.run(main, parser.parse_args())
