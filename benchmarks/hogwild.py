"""Hogwild! passes over views captured from real runs, against plain batched decoding and re-encoding.

The views come from ``benchmarks/hogwild_capture.py`` (the strategy on an arith problem, SmolLM2,
256 passes, 2 and 4 workers; ``benchmarks/views/{2,4}w.json``): every segment of the last pass is
rebuilt at its captured length, the prompt and the history at their captured (unshifted) places,
every other segment written after the prompt alone (so, as in the run, shifted in the views).

- ``over_batched_Nw``: one Hogwild! pass of the N workers' views against one plain decode step of N
  sequences whose contexts are as long as those views (goal <= 1.3);
- ``reencode_cached_over_hogwild``: what a text-level approximation with a prefix cache pays per step
  (each worker's view after the cached prompt and history, its changed tail, prefilled over that
  prefix: one pass of both workers' tails) against one Hogwild! pass of the same 2 workers (goal >= 3).

Plain and Hogwild! steps alternate in one process so both see the same load; each figure is the best
of ``ROUNDS`` rounds of ``STEPS`` steps (other processes only ever add time). SmolLM2-135M in bf16 on
CPU by default. The last line printed is JSON: {"over_batched_2w", "over_batched_4w",
"reencode_cached_over_hogwild"} plus the raw milliseconds under "raw".
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from paragen.engine.hogwild.session import EngineSharedSession
from paragen.engine.llm_engine import LLMEngine
from paragen.types import SamplingParams, SharedRow

TEXT = "The workers split the problem: one checks the arithmetic while the other plans the next step. "
VIEWS = Path(__file__).parent / "views"
ROUNDS, STEPS = 5, 8
PARAMS = SamplingParams(max_tokens=100_000, temperature=0.7, seed=0)


def token_run(engine: LLMEngine, n: int) -> list[int]:
    ids: list[int] = engine.tokenizer(TEXT * (n // 10 + 1), add_special_tokens=False)["input_ids"]
    return ids[:n]


class HogwildState:
    """A captured pass rebuilt: every segment at its length; the rows then decode one token a step."""

    def __init__(self, engine: LLMEngine, capture: dict[str, Any]):
        self.session = session = EngineSharedSession(engine, PARAMS, len(capture["views"]))
        lengths, bases = capture["lengths"], capture["bases"]
        first = capture["views"][0]
        self.ids = {s: session.new_segment() for s in lengths}
        prompt, offset = first[0], 0
        self.prefix = []  # the leading segments stored where they sit (the prompt, the history)
        for s in first:
            if bases[str(s)] != offset:
                break
            self.prefix.append(self.ids[str(s)])
            session.logits([SharedRow(0, self.prefix, token_run(engine, lengths[str(s)]))])
            offset += lengths[str(s)]
        for s, n in lengths.items():
            if session.length(self.ids[s]) == 0 and n > 0 and s != str(prompt):
                session.logits([SharedRow(0, [self.ids[str(prompt)], self.ids[s]], token_run(engine, n))])
        self.views = [[self.ids[str(s)] for s in view] for view in capture["views"]]
        self.last = [1] * len(self.views)

    def view_length(self, worker: int) -> int:
        return sum(self.session.length(s) for s in self.views[worker])

    def step(self) -> None:
        rows = [
            SharedRow(w, view, [t]) for w, (view, t) in enumerate(zip(self.views, self.last, strict=True))
        ]
        self.last = [sample.token_id for sample in self.session.forward(rows)]

    def reencode_tails(self) -> None:
        """Each view's tail (past the prompt and history) prefilled over that cached prefix, then dropped."""
        tails = [self.session.new_segment() for _ in self.views]
        prefix_len = sum(self.session.length(s) for s in self.prefix)
        rows = [
            SharedRow(w, [*self.prefix, tail], [1] * (self.view_length(w) - prefix_len))
            for w, tail in enumerate(tails)
        ]
        self.session.forward(rows)
        for tail in tails:
            self.session.free_segment(tail)


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


def over_batched(engine: LLMEngine, capture: dict[str, Any]) -> tuple[float, float]:
    state = HogwildState(engine, capture)
    plain_batch(engine, len(state.views), state.view_length(0))
    hog, plain = [], []
    for _ in range(ROUNDS):
        plain.append(best_step_ms(engine.step))
        hog.append(best_step_ms(state.step))
    abort_all(engine)
    state.session.close()
    return min(hog), min(plain)


def reencode_over_hogwild(engine: LLMEngine, capture: dict[str, Any]) -> tuple[float, float, int]:
    state = HogwildState(engine, capture)
    tail = state.view_length(0) - sum(state.session.length(s) for s in state.prefix)
    hog, reencode = [], []
    for _ in range(ROUNDS):
        hog.append(best_step_ms(state.step))
        reencode.append(best_step_ms(state.reencode_tails))
    state.session.close()
    return min(hog), min(reencode), tail


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="checkpoint (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--dtype", default="auto", help="auto: bf16 on CUDA or where the CPU has it")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--views", type=Path, default=VIEWS, help="captures: {2,4}w.json")
    args = parser.parse_args()
    engine = LLMEngine(args.model, dtype=args.dtype, device=args.device)
    captures = {n: json.loads((args.views / f"{n}w.json").read_text())["last"] for n in (2, 4)}
    raw: dict[str, float] = {}
    for n, capture in captures.items():
        hog, plain = over_batched(engine, capture)
        raw |= {f"hogwild_{n}w_ms": hog, f"plain_{n}seq_ms": plain}
        width = len(capture["views"][0])
        print(
            f"{n} workers ({width} segments a view): hogwild pass {hog:.1f} ms, plain batched {plain:.1f} ms"
        )
    hog, reencode, tail = reencode_over_hogwild(engine, captures[2])
    raw |= {"hogwild_2w_ms_again": hog, "reencode_cached_2w_ms": reencode, "tail_tokens": tail}
    print(f"2 workers: hogwild pass {hog:.1f} ms, re-encoding both {tail}-token tails {reencode:.1f} ms")
    assert engine.num_free_blocks == engine.blocks.num_blocks
    result = {
        "over_batched_2w": round(raw["hogwild_2w_ms"] / raw["plain_2seq_ms"], 3),
        "over_batched_4w": round(raw["hogwild_4w_ms"] / raw["plain_4seq_ms"], 3),
        "reencode_cached_over_hogwild": round(raw["reencode_cached_2w_ms"] / raw["hogwild_2w_ms_again"], 2),
        "raw": {k: round(v, 2) for k, v in raw.items()},
    }
    where = f"{engine.num_threads} threads" if args.device == "cpu" else args.device
    print(f"model {args.model or 'SmolLM2-135M-Instruct'}, {engine.dtype}, {where}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
