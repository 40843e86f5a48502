"""Concurrent Hogwild! sessions through the engine backend: merged forward passes against one pass each.

An eval runs several problems at once (8 by default), so several Hogwild! sessions decode side by
side. With merging, the step thread runs the passes that wait together as one forward
(``forward_together``); without it, each session's pass runs alone, one after another. Each
session has 2 workers that see the prompt, the other's tokens and their own, and decodes a fixed
number of steps (no early stop, so both sides do the same work). The sessions are not in lockstep:
their prompts differ in length, they run different numbers of steps, and each worker ends a step
every 6-24 tokens (its own schedule), folds it into the session's history (``append_from``) and
starts the next with its last token and a header (a multi-token row beside one-token rows).

- ``unmerged_over_merged_8x2w``: wall time of 8 concurrent sessions without merging over with it;
- ``merged_8_over_one``: 8 concurrent merged sessions over one session alone (8 would be no sharing).

The two settings alternate (ABAB) in one process; each figure is the best of ``ROUNDS``. SmolLM2-135M
on CPU (bf16 where the CPU has it). The last line printed is JSON.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import anyio

from paragen.backends.engine import EngineBackend
from paragen.types import SamplingParams, SharedRow

PROMPT = "Two workers solve the problem together; each sees what the other writes as it writes it. " * 4
PARAMS = SamplingParams(max_tokens=100_000, temperature=0.7, seed=0)
HEADER = "### Past steps\n"
SESSIONS, STEPS, ROUNDS = 8, 48, 3


async def session(backend: EngineBackend, index: int) -> None:
    rng = random.Random(index)
    async with backend.shared_session(PARAMS, num_workers=2) as s:
        p, history = await s.new_segment(), await s.new_segment()
        own = [await s.new_segment(), await s.new_segment()]
        (first,) = await s.forward([SharedRow(0, [p], s.tokenize(PROMPT * (1 + index % 4)))])
        await s.forward([SharedRow(0, [p, history], s.tokenize(HEADER))])
        pending = [[first.token_id], [first.token_id]]
        left = [rng.randrange(6, 25), rng.randrange(6, 25)]
        for _ in range(STEPS + 8 * (index % 3)):
            rows = [SharedRow(w, [p, history, own[1 - w], own[w]], pending[w]) for w in (0, 1)]
            pending = [[sample.token_id] for sample in await s.forward(rows)]
            for w in (0, 1):
                left[w] -= 1
                if left[w] == 0:  # a step boundary: fold the step into the history, start the next
                    await s.append_from(history, own[w])
                    await s.free_segment(own[w])
                    own[w], left[w] = await s.new_segment(), rng.randrange(6, 25)
                    pending[w] += s.tokenize(f"**Worker {w} [{rng.randrange(2, 9)}]:** ")


async def wall_time(backend: EngineBackend, num_sessions: int) -> float:
    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for index in range(num_sessions):
            tg.start_soon(session, backend, index)
    return time.perf_counter() - start


async def measure(backend: EngineBackend) -> dict[str, float]:
    await wall_time(backend, 2)  # warm-up: first-call allocations, kernel selection
    times: dict[str, list[float]] = {"one": [], "merged": [], "unmerged": []}
    for _ in range(ROUNDS):
        times["one"].append(await wall_time(backend, 1))
        for merge in (True, False):
            backend.runtime.calls.merge_batched_calls = merge
            times["merged" if merge else "unmerged"].append(await wall_time(backend, SESSIONS))
    backend.runtime.calls.merge_batched_calls = True
    return {name: min(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="checkpoint (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--dtype", default="auto", help="auto: bf16 where the CPU has it, else fp32")
    args = parser.parse_args()
    backend = EngineBackend.from_spec(args.model, dtype=args.dtype)
    best = anyio.run(measure, backend)
    assert backend.engine.num_free_blocks == backend.engine.blocks.num_blocks
    anyio.run(backend.aclose)
    print(f"{SESSIONS} sessions x 2 workers x {STEPS}-64 steps: merged {best['merged']:.2f} s, ", end="")
    print(f"one pass each {best['unmerged']:.2f} s; one session alone {best['one']:.2f} s")
    print(f"model {args.model or 'SmolLM2-135M-Instruct'}, {backend.engine.dtype}")
    result = {
        "unmerged_over_merged_8x2w": round(best["unmerged"] / best["merged"], 3),
        "merged_8_over_one": round(best["merged"] / best["one"], 3),
        "raw_s": {k: round(v, 3) for k, v in best.items()},
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
