"""Hogwild! decode steps against plain batched decoding and against re-encoding, side by side.

- ``over_batched_Nw``: one Hogwild! forward of N workers (combined-layout views: a shared prompt and
  history, a header, the other workers' current steps, an own header, the own step) against one plain
  decode step of N sequences whose contexts are as long as those views (goal <= 1.3);
- ``reencode_over_hogwild_1k``: re-encoding each of 2 workers' ~1k-token views from scratch every step
  (one prefill per worker, the naive way to let workers see each other) against one Hogwild! step of the
  same 2 workers (goal >= 5).

Plain and Hogwild! steps alternate in one process so both see the same load; each figure is the best
of ``ROUNDS`` rounds of ``STEPS`` steps (other processes only ever add time). SmolLM2-135M in bf16 on
CPU by default. The last line printed is JSON: {"over_batched_2w", "over_batched_4w",
"reencode_over_hogwild_1k"} plus the raw milliseconds under "raw".
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from paragen.backends.base import SharedRow
from paragen.engine.hogwild import SharedCache
from paragen.engine.llm_engine import LLMEngine
from paragen.types import SamplingParams

TEXT = "The workers split the problem: one checks the arithmetic while the other plans the next step. "
HISTORY, HEADER, STEP = 888, 8, 48  # tokens: shared prompt + finished steps, each header, each current step
ROUNDS, STEPS = 5, 8
PARAMS = SamplingParams(max_tokens=100_000, temperature=0.7, seed=0)


def token_run(engine: LLMEngine, n: int) -> list[int]:
    ids: list[int] = engine.tokenizer(TEXT * (n // 10 + 1), add_special_tokens=False)["input_ids"]
    return ids[:n]


class HogwildState:
    """N workers mid-step in the combined layout: [history, header, others' steps, own header, own step]."""

    def __init__(self, engine: LLMEngine, num_workers: int):
        self.cache = SharedCache(engine, PARAMS, num_workers)
        new = self.cache.new_segment
        self.history, self.header, self.own_header = new(), new(), new()
        self.steps = [new() for _ in range(num_workers)]
        self.cache.forward([SharedRow(0, [self.history], token_run(engine, HISTORY))])
        self.cache.forward([SharedRow(0, [self.header], token_run(engine, HEADER))])
        self.cache.forward([SharedRow(0, [self.own_header], token_run(engine, HEADER))])
        rows = [SharedRow(w, [self.history, s], token_run(engine, STEP)) for w, s in enumerate(self.steps)]
        self.last = [sample.token_id for sample in self.cache.forward(rows)]

    def view(self, worker: int) -> list[int]:
        others = [s for w, s in enumerate(self.steps) if w != worker]
        return [self.history, self.header, *others, self.own_header, self.steps[worker]]

    def view_length(self, worker: int) -> int:
        return sum(self.cache.length(s) for s in self.view(worker))

    def step(self) -> None:
        rows = [SharedRow(w, self.view(w), [t]) for w, t in enumerate(self.last)]
        self.last = [sample.token_id for sample in self.cache.forward(rows)]


def plain_batch(engine: LLMEngine, num_seqs: int, context: int) -> None:
    """``num_seqs`` running sequences with ``context`` tokens each (one shared prefill, then forks)."""
    engine.add_request(token_run(engine, context), PARAMS, num_seqs, ignore_eos=True)
    engine.step()


def best_step_ms(step: Callable[[], Any]) -> float:
    times = []
    for _ in range(STEPS):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return 1000 * min(times)


def abort_all(engine: LLMEngine) -> None:
    for seq_id in list(engine.seqs):
        engine.abort(seq_id)


def over_batched(engine: LLMEngine, num_workers: int) -> tuple[float, float]:
    state = HogwildState(engine, num_workers)
    plain_batch(engine, num_workers, state.view_length(0))
    hog, plain = [], []
    for _ in range(ROUNDS):
        plain.append(best_step_ms(engine.step))
        hog.append(best_step_ms(state.step))
    abort_all(engine)
    state.cache.close()
    return min(hog), min(plain)


def reencode_step(engine: LLMEngine, views: list[list[int]]) -> None:
    """Every worker's whole view prefilled from scratch, its next token sampled, its cache dropped."""
    for ids in views:
        engine.add_request(ids, PARAMS)
        engine.step()
        abort_all(engine)


def reencode_over_hogwild(engine: LLMEngine) -> tuple[float, float]:
    state = HogwildState(engine, 2)
    length = state.view_length(0)
    views = [token_run(engine, length), token_run(engine, length)]
    hog, reencode = [], []
    for _ in range(ROUNDS):
        hog.append(best_step_ms(state.step))
        t = time.perf_counter()
        reencode_step(engine, views)
        reencode.append(1000 * (time.perf_counter() - t))
    state.cache.close()
    return min(hog), min(reencode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="checkpoint (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--dtype", default="auto", help="auto: bf16 where the CPU has it, else fp32")
    args = parser.parse_args()
    engine = LLMEngine(args.model, dtype=args.dtype)
    raw: dict[str, float] = {}
    for n in (2, 4):
        hog, plain = over_batched(engine, n)
        raw |= {f"hogwild_{n}w_ms": hog, f"plain_{n}seq_ms": plain}
        print(f"{n} workers: hogwild step {hog:.1f} ms, plain batched step {plain:.1f} ms")
    hog, reencode = reencode_over_hogwild(engine)
    raw |= {"hogwild_2w_1k_ms": hog, "reencode_2w_1k_ms": reencode}
    print(f"2 workers at ~1k context: hogwild step {hog:.1f} ms, re-encoding both views {reencode:.1f} ms")
    assert engine.num_free_blocks == engine.blocks.num_blocks
    result = {
        "over_batched_2w": round(raw["hogwild_2w_ms"] / raw["plain_2seq_ms"], 3),
        "over_batched_4w": round(raw["hogwild_4w_ms"] / raw["plain_4seq_ms"], 3),
        "reencode_over_hogwild_1k": round(raw["reencode_2w_1k_ms"] / raw["hogwild_2w_1k_ms"], 2),
        "raw": {k: round(v, 2) for k, v in raw.items()},
    }
    print(f"model {args.model or 'SmolLM2-135M-Instruct'}, {engine.dtype}, {engine.num_threads} threads")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
