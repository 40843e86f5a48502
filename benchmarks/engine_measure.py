"""What benchmarks/engine.py measures: tokens/s of the engine and HF, the machine's limits, a step's costs.

Every figure is the best of ``REPEATS`` runs, since other processes on a small machine add noise in
one direction only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from paragen.engine.llm_engine import LLMEngine
from paragen.types import SamplingParams

REPEATS = 3


def best_time(fn: Callable[[], Any], repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def engine_tps(engine: LLMEngine, ids: list[int], n: int, tokens: int) -> float:
    params = SamplingParams(max_tokens=tokens, temperature=0.7, seed=0)
    engine.add_request(ids, params, n, ignore_eos=True)  # warm-up: allocator and kernels for these shapes
    while not engine.is_idle:
        engine.step()

    def run() -> None:
        engine.add_request(ids, params, n, ignore_eos=True)
        while not engine.is_idle:
            engine.step()
        sync(str(engine.model.device))

    return n * tokens / best_time(run)


def hf_tps(model: Any, ids: list[int], n: int, tokens: int) -> float:
    inputs = torch.tensor([ids], device=model.device)
    kwargs = dict(
        do_sample=True, temperature=0.7, top_p=1.0, top_k=0, max_new_tokens=tokens, min_new_tokens=tokens
    )
    model.generate(inputs, num_return_sequences=n, **{**kwargs, "max_new_tokens": 2, "min_new_tokens": 2})
    return n * tokens / best_time(lambda: model.generate(inputs, num_return_sequences=n, **kwargs))


def matmul_flops(device: str, dtype: torch.dtype) -> float:
    size = 4096 if device.startswith("cuda") else 1024
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    reps = 50 if device.startswith("cuda") else 10

    def run() -> None:
        for _ in range(reps):
            a @ b
        sync(device)

    run()
    return 2 * size**3 * reps / best_time(run, 3)


def memory_bandwidth(device: str) -> float:
    """Read bandwidth: a decode step reads its weights and writes almost nothing.

    Summing a 512 MiB buffer reads every byte once. (A copy, which also writes, moves fewer
    bytes per second on this machine, so it would be the easier yardstick.)
    """
    src = torch.ones(128 * 2**20, dtype=torch.float32, device=device)

    def run() -> None:
        src.sum()
        sync(device)

    run()
    return src.numel() * src.element_size() / best_time(run, 5)


def matmul_ceiling(engine: LLMEngine, n: int) -> float:
    """Seconds for one step's weight matmuls alone (no attention, norms or sampling) at batch n.

    This is what the matmul library itself reaches on the model's shapes: the part of the gap
    to the machine's limit that no amount of work outside the matmuls can close.
    """
    m, cfg = engine.model, engine.cfg
    x = torch.randn(n, cfg.hidden_size, dtype=m.dtype, device=m.device)
    h = torch.randn(n, cfg.intermediate_size, dtype=m.dtype, device=m.device)

    def run() -> None:
        for layer in m.layers:
            m.linear(x, layer.qkv, None)
            m.linear(x, layer.o, None)
            m.linear(x, layer.gate_up, None)
            m.linear(h, layer.down, None)
        m.linear(x, m.lm_head, None)
        sync(str(m.device))

    run()
    return best_time(run, 5)


def model_costs(engine: LLMEngine, context: int) -> tuple[float, float, int]:
    """FLOPs per generated token, bytes of weights read per decode step, and matmul weights.

    The bytes are those of the weights as the engine holds them (a GGUF is dequantized on load, so
    a Q4 file's weights are read as bf16 or fp32), counted before oneDNN packs them.
    """
    m, cfg = engine.model, engine.cfg
    weights = [m.lm_head] + [t for layer in m.layers for t in (layer.qkv, layer.o, layer.gate_up, layer.down)]
    params = sum(t.numel() for t in weights)
    attn = 2 * 2 * cfg.num_layers * cfg.num_heads * cfg.head_dim * context  # QK^T and PV
    return 2 * params + attn, float(m.num_weight_bytes), params


def prefill_ratio(engine: LLMEngine, ids: list[int]) -> tuple[float, float]:
    params = SamplingParams(max_tokens=1, temperature=0.7, seed=0)

    def first_tokens(n: int) -> Callable[[], None]:
        def run() -> None:
            engine.add_request(ids, params, n)
            engine.step()  # the one prefill step gives every sample its first token
            sync(str(engine.model.device))
            assert engine.is_idle

        return run

    first_tokens(16)()
    t1, t16 = best_time(first_tokens(1), 3), best_time(first_tokens(16), 3)
    return t1, t16
