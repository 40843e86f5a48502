"""Capture the views of a real Hogwild! run (the strategy on an arith problem) for benchmarks/hogwild.py.

Runs ``hogwild`` with N workers for ``--passes`` forward passes (no early stop) on SmolLM2 and records
the segment layout of every pass: each row's view as segment ids, and every segment's length and
base. Writes the last pass (what the benchmark replays) and the segments per view over the run:

    .venv/bin/python benchmarks/hogwild_capture.py --workers 2 --passes 256 -o benchmarks/views/2w.json
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

import paragen.engine.hogwild.batch as batch
from paragen import Orchestrator, Problem, SamplingParams, build_strategy
from paragen.backends.engine import EngineBackend
from paragen.engine.hogwild.session import EngineSharedSession
from paragen.errors import EngineError
from paragen.types import SharedSample

QUESTION = "What is (347 * 29) + 1185 - 64?"


def layout(job: batch.SharedForward) -> dict[str, Any]:
    session = job.session
    ids = sorted({s for row in job.rows for s in row.view})
    return {
        "views": [list(row.view) for row in job.rows],
        "lengths": {str(s): session.length(s) for s in ids},
        "bases": {str(s): session.base(s) for s in ids},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--passes", type=int, default=256)
    parser.add_argument("-o", "--out", type=Path, required=True)
    args = parser.parse_args()
    passes: list[dict[str, Any]] = []
    real = batch.forward_together

    def recording(jobs: Sequence[batch.SharedForward]) -> list[list[SharedSample] | EngineError]:
        outcomes = real(jobs)
        passes.extend(layout(job) for job in jobs if len(job.rows) == args.workers)
        return outcomes

    batch.forward_together = recording
    folds = [0]  # finished steps folded into the history (each would otherwise stay a segment of every view)
    fold = EngineSharedSession.append_from

    def counting(session: EngineSharedSession, dst: int, src: int) -> None:
        folds[0] += 1
        fold(session, dst, src)

    EngineSharedSession.append_from = counting  # type: ignore[method-assign,assignment]
    backend = EngineBackend.from_spec(None)
    strategy = build_strategy(
        "hogwild", {"workers": args.workers, "max_forward_passes": args.passes, "stop_at_answer": False}
    )
    orchestrator = Orchestrator(
        backend, defaults=SamplingParams(max_tokens=args.passes, temperature=0.7, seed=0)
    )
    anyio.run(orchestrator.run, strategy, Problem(question=QUESTION))
    per_view = [len(p["views"][0]) for p in passes]
    widths = [sum(p["lengths"][str(s)] for s in p["views"][0]) for p in passes]
    summary = {"passes": len(passes), "segments_per_view": per_view[:: max(1, len(passes) // 16)]}
    summary |= {"view_tokens_last": widths[-1], "segments_last": per_view[-1], "steps_folded": folds[0]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"summary": summary, "last": passes[-1]}, indent=1))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
