"""The fused CPU attention over Hogwild! views: a session's workers as one class, against one by one.

A 4-worker eval's pass reads 8 sessions' views of ~1,100 slots each (prompt, history, the workers'
current steps), and every worker of a session reads the same slots, each in its own order and at its
own shifts. The pass's plan (``paragen/engine/hogwild/reads.py``) gives those rows one list of keys (a class),
so the kernel loads each key from memory once for all of them; this times a pass's attention (one
call per layer, 30 layers) with the classes as built, and with every row its own class (each worker
reading the keys again), in one process, alternating. A class of one token is summed as a plain decode
row is (fp32 probabilities, libm's exp, scored alone), so the ratio holds what a class of several
gains from its cheaper sums as well as from loading each key once.

A model's 30 layers hold 30 caches, ~200 MB of keys and values a 4-worker pass reads, so each layer
here reads its own cache ("cold", as in a forward); "hot" reads one layer's 30 times (in cache).

- ``classes_over_rows_2w`` / ``classes_over_rows_4w``: cold pass time with classes over without;
- ``cold_over_hot_4w``: what memory adds to the 4-worker pass.

Shapes are SmolLM2-135M's (9 query heads, 3 KV heads, head size 64), bf16 where the CPU has it. The
last line printed is JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Callable

import torch

from paragen.engine.hogwild.reads import RowView, plan_reads
from paragen.engine.kernels import fused

HEADS, KV_HEADS, HEAD_DIM, LAYERS, SESSIONS = 9, 3, 64, 30, 8
PROMPT, OWN, ROUNDS = 400, 40, 5


def session_views(workers: int, view: int) -> list[RowView]:
    """Each session: a prompt, a history, and every worker's current step; worker w's view holds them
    all, the others' steps in order and its own last, each segment at a shift of its own."""
    rows = []
    for s in range(SESSIONS):
        base = s * 3000
        prompt = list(range(base, base + PROMPT))
        history = list(range(base + PROMPT, base + view - workers * OWN))
        steps = [list(range(base + 2500 + w * OWN, base + 2500 + (w + 1) * OWN)) for w in range(workers)]
        for w in range(workers):
            others = [v for v in range(workers) if v != w]
            segments = [prompt, history, *(steps[v] for v in others), steps[w]]
            shifts = [0, 7, *(13 + v for v in others), 50 + w]
            rows.append(RowView(segments, shifts, 1, view - 1))
    return rows


def alone(reads: fused.FusedReads) -> fused.FusedReads:
    """The same reads with every token its own class."""
    each = torch.arange(len(reads.class_tokens) + 1, dtype=torch.int32)
    return dataclasses.replace(reads, class_start=each, max_class=1)


def pass_ms(attend: Callable[[torch.Tensor], torch.Tensor], caches: list[torch.Tensor], cold: bool) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for layer in range(LAYERS):
            attend(caches[layer] if cold else caches[0])
        best = min(best, time.perf_counter() - start)
    return 1000 * best


def measure(workers: int, view: int, dtype: torch.dtype) -> dict[str, float]:
    torch.manual_seed(0)
    caches = [torch.randn(2 * KV_HEADS, SESSIONS * 3000, HEAD_DIM).to(dtype) for _ in range(LAYERS)]
    rows = session_views(workers, view)
    qkv = torch.randn(len(rows), HEADS + 2 * KV_HEADS, HEAD_DIM).to(dtype)
    classes, rotations = fused.hogwild_reads(
        plan_reads(rows), (torch.randn(4096, HEAD_DIM), torch.randn(4096, HEAD_DIM))
    )

    def run(reads: fused.FusedReads) -> Callable[[torch.Tensor], torch.Tensor]:
        layers = fused.attention(
            reads, num_heads=HEADS, num_kv_heads=KV_HEADS, scale=0.125, rotations=rotations
        )
        return lambda kv: layers(qkv, kv)

    shared, single = run(classes), run(alone(classes))
    for kv in caches:  # warm up, and the kernel built
        shared(kv)
    out: dict[str, list[float]] = {"classes_cold": [], "rows_cold": [], "classes_hot": []}
    for _ in range(2):  # alternating
        out["classes_cold"].append(pass_ms(shared, caches, cold=True))
        out["rows_cold"].append(pass_ms(single, caches, cold=True))
        out["classes_hot"].append(pass_ms(shared, caches, cold=False))
    return {k: min(v) for k, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = torch.bfloat16 if fused.enabled(torch.device("cpu"), torch.bfloat16) else torch.float32
    if not fused.enabled(torch.device("cpu"), dtype):
        raise SystemExit(
            "the fused attention is not built here (no C compiler, or PARAGEN_FUSED_ATTENTION=0)"
        )
    two, four = measure(2, 950, dtype), measure(4, 1100, dtype)
    for name, got in (("2 workers", two), ("4 workers", four)):
        print(
            f"{name}: a pass's attention {got['classes_cold']:.1f} ms with classes, "
            f"{got['rows_cold']:.1f} ms row by row; in cache {got['classes_hot']:.1f} ms"
        )
    print(f"{dtype}, {args.threads} threads")
    result = {
        "classes_over_rows_2w": round(two["classes_cold"] / two["rows_cold"], 3),
        "classes_over_rows_4w": round(four["classes_cold"] / four["rows_cold"], 3),
        "cold_over_hot_4w": round(four["classes_cold"] / four["classes_hot"], 3),
        "raw_ms": {f"{k}_{w}w": round(v, 2) for w, got in ((2, two), (4, four)) for k, v in got.items()},
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
