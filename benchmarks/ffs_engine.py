"""What a user waits for in a first-finish run on the engine: the decision, then the cancellations.

FFS (k=1) and FFS-k (k=2) with SmolLM2 at n = 8 and n = 32. A run is decided when its k-th
usable sample ends (the winner's end); its other samples are then cancelled. Two figures:

- spread: engine steps from the winner's end to the last sibling's end (every sample's end is
  stamped with the engine's step count when the run books it). Target <= 1.5: one batch abort,
  applied at the next step boundary, not one step per sibling.
- latency / winner's end: what the cancellations add to the run. Target <= 1.05.

Also counted: samples that ended "ok" after the decision (they should have been cancelled).
Samples need no boxed answer here (``require_answer=False``): what is measured is the mechanics.
Options: ``--max-tokens N`` (default 64), ``--repeats R`` (default 2), ``--device``, ``--model``.
The last line printed is JSON: {"spread_steps_max", "latency_over_winner_max", "ok_after_decision",
"step_ms"} over every setting, plus the per-setting figures under "settings".
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import anyio

from paragen import Orchestrator, Problem
from paragen.backends.engine import EngineBackend
from paragen.events import Note, SampleEnded
from paragen.types import SamplingParams
from strategies.ffs import FFS

QUESTION = "What is 7 + 5?"
SETTINGS = [(1, 8), (2, 8), (1, 32), (2, 32)]  # (k, n)


class StepClock:
    """Counts the engine's steps, the tokens they computed and their time (wraps the engine's
    ``step``). A call that found nothing to run (every sequence stalled) is not a step."""

    def __init__(self, backend: EngineBackend) -> None:
        engine = backend.engine
        self.steps = 0
        self.tokens = 0
        self.busy_s = 0.0
        inner = engine.step

        def step() -> Any:
            start = time.perf_counter()
            out = inner()
            self.busy_s += time.perf_counter() - start
            if out:
                self.steps += 1
                self.tokens += len(out)
            return out

        engine.step = step  # type: ignore[method-assign]


class RunLog:
    """The events of one run, each end stamped with the engine's step count when it was booked."""

    def __init__(self, clock: StepClock) -> None:
        self.clock = clock
        self.ends: dict[int, tuple[float, int, str]] = {}  # trace id -> (end, step, status)
        self.winners: list[int] = []

    def __call__(self, event: Any) -> None:
        if isinstance(event, SampleEnded) and event.trace.kind == "sample":
            trace = event.trace
            self.ends[trace.id] = (trace.end or 0.0, self.clock.steps, trace.status)
        elif isinstance(event, Note) and event.message == "ffs: enough finishers":
            self.winners = list(event.data["winners"])


async def one_run(
    backend: EngineBackend, clock: StepClock, k: int, n: int, seed: int, max_tokens: int
) -> dict[str, Any]:
    log = RunLog(clock)
    defaults = SamplingParams(max_tokens=max_tokens, seed=seed)
    orch = Orchestrator(backend, defaults=defaults, on_event=log)
    strategy = FFS(n=n, k=k, require_answer=False, max_tokens=max_tokens)
    result = await orch.run(strategy, Problem(id=f"s{seed}", question=QUESTION))
    if not log.winners:  # no k samples finished before max_tokens: nothing was cancelled
        return {"decided": False}
    decision_end, decision_step = max(log.ends[i][:2] for i in log.winners)
    rest = [v for i, v in log.ends.items() if i not in log.winners]
    last_end, last_step = max((v[:2] for v in rest), default=(decision_end, decision_step))
    return {
        "decided": True,
        "spread_steps": last_step - decision_step,
        "spread_s": last_end - decision_end,
        "latency_over_winner": result.usage.latency_s / decision_end,
        "ok_after_decision": sum(1 for end, _, status in rest if status == "ok" and end > decision_end),
    }


async def setting(
    backend: EngineBackend, clock: StepClock, k: int, n: int, args: argparse.Namespace
) -> dict[str, Any]:
    decided: list[dict[str, Any]] = []
    for seed in range(args.repeats * 3):  # a run nobody finished within max_tokens decides nothing
        run = await one_run(backend, clock, k, n, seed, args.max_tokens)
        if run["decided"]:
            decided.append(run)
        if len(decided) == args.repeats:
            break
    if not decided:
        print(f"k={k} n={n}: no run was decided within {args.max_tokens} tokens")
        return {"k": k, "n": n, "runs": 0}
    out = {
        "k": k,
        "n": n,
        "runs": len(decided),
        "spread_steps_max": max(r["spread_steps"] for r in decided),
        "spread_s_median": round(statistics.median(r["spread_s"] for r in decided), 3),
        "latency_over_winner_max": round(max(r["latency_over_winner"] for r in decided), 4),
        "ok_after_decision": sum(r["ok_after_decision"] for r in decided),
    }
    print(
        f"k={k} n={n:>2} ({len(decided)} runs): spread {out['spread_steps_max']} steps "
        f"({out['spread_s_median']} s median), latency/winner end {out['latency_over_winner_max']}, "
        f"ok after the decision {out['ok_after_decision']}"
    )
    return out


async def main(args: argparse.Namespace) -> None:
    backend = EngineBackend.from_spec(args.model, device=args.device)
    clock = StepClock(backend)
    try:
        await one_run(backend, clock, 1, 8, 999, args.max_tokens)  # warm-up
        clock.steps, clock.busy_s = 0, 0.0
        results = [await setting(backend, clock, k, n, args) for k, n in SETTINGS]
    finally:
        await backend.aclose()
    measured = [r for r in results if r["runs"]]
    step_ms = 1000 * clock.busy_s / max(clock.steps, 1)
    print(f"mean engine step {step_ms:.1f} ms; targets: spread <= 1.5 steps, latency/winner end <= 1.05")
    summary = {
        "spread_steps_max": max((r["spread_steps_max"] for r in measured), default=None),
        "latency_over_winner_max": max((r["latency_over_winner_max"] for r in measured), default=None),
        "ok_after_decision": sum(r["ok_after_decision"] for r in measured),
        "step_ms": round(step_ms, 1),
        "settings": results,
    }
    print(json.dumps(summary))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default=None, help="checkpoint (default: SmolLM2-135M-Instruct)")
    return parser.parse_args()


if __name__ == "__main__":
    anyio.run(main, parse_args())
