"""The engine against HF transformers, llama.cpp and this machine's limits, measured side by side.

- decode tokens/s at n = 1, 8, 32 against HF ``generate`` (same weights, dtype and prompt);
- aggregate tokens/s for n = 8 samples against llama.cpp (llama-cpp-python, the same GGUF)
  generating the same 8 samples one after another, in a child process: a baseline that is missing or
  crashes is null in the JSON, with a line saying why;
- fraction of the machine's limit: n = 64 against measured matmul FLOP/s / FLOPs per token,
  n = 1 against measured memory bandwidth / bytes of weights read per step;
- prefill time of one prompt shared by n = 16 against n = 1.

Every generation runs a fixed number of tokens (EOS ignored). Each figure is the best of
``REPEATS`` runs, since other processes on a small machine add noise in one direction only,
and the engine is measured again right after each baseline so that both see the same load.
Options: ``--device cuda``, ``--model PATH``, ``--tokens N``, ``--skip-hf``.
The last line printed is JSON: {"vs_hf_n8", "vs_llamacpp_n8", "compute_frac_n64",
"bandwidth_frac_n1", "prefill_n16_over_n1"} (plus the raw figures under "raw").
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import torch
from baselines import run_isolated

from paragen.engine import loader
from paragen.engine.llm_engine import LLMEngine
from paragen.types import SamplingParams

PROMPT = "Write a short story about a robot who learns to paint. Describe its first painting in detail."
LONG_PROMPT = " ".join(["The history of the printing press begins in the fifteenth century."] * 24)
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


def llamacpp_tps(gguf: str, n: int, tokens: int, threads: int) -> tuple[float | None, str | None]:
    """llama.cpp's aggregate tokens/s, measured in a child process (``--llamacpp-child``), or why not."""
    child = [__file__, "--llamacpp-child", gguf, "--tokens", str(tokens), "--threads", str(threads)]
    return run_isolated([*child, "--n", str(n)])


def llamacpp_child(gguf: str, n: int, tokens: int, threads: int) -> None:
    try:
        from llama_cpp import Llama
    except ImportError:
        print("none: llama_cpp is not installed")
        return
    print(llamacpp_measure(Llama, gguf, PROMPT, n, tokens, threads))


def llamacpp_measure(llama: Any, gguf: str, prompt: str, n: int, tokens: int, threads: int) -> float:
    llm = llama(model_path=gguf, n_ctx=512, n_threads=threads, n_batch=512, verbose=False, seed=0)
    eos = llm.token_eos()

    def run() -> None:
        for i in range(n):  # the same n samples, one after another
            llm.create_completion(prompt, max_tokens=tokens, temperature=0.7, seed=i, logit_bias={eos: -1e9})

    return n * tokens / best_time(run)


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
    """FLOPs per generated token, bytes of weights read per decode step, and matmul weights."""
    m, cfg = engine.model, engine.cfg
    weights = [m.lm_head] + [t for layer in m.layers for t in (layer.qkv, layer.o, layer.gate_up, layer.down)]
    params = sum(t.numel() for t in weights)
    attn = 2 * 2 * cfg.num_layers * cfg.num_heads * cfg.head_dim * context  # QK^T and PV
    return 2 * params + attn, params * m.lm_head.element_size(), params


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default=None)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--skip-hf", action="store_true")
    parser.add_argument("--llamacpp-child", metavar="GGUF", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, default=8, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.llamacpp_child:
        llamacpp_child(args.llamacpp_child, args.n, args.tokens, args.threads)
        return
    engine = LLMEngine(args.model, device=args.device, kv_cache_mb=2048)
    print(
        f"model {args.model or 'SmolLM2-135M-Instruct'}, {engine.dtype}, {args.device}, "
        f"{torch.get_num_threads()} threads"
    )
    ids = list(engine.tokenizer(PROMPT)["input_ids"])
    raw: dict[str, Any] = {}
    for n in (1, 8, 32, 64):
        raw[f"engine_n{n}"] = engine_tps(engine, ids, n, args.tokens)
        print(f"engine     n={n:<3} {raw[f'engine_n{n}']:8.1f} tok/s")
    if not args.skip_hf:
        from transformers import AutoModelForCausalLM

        model_dir = loader.resolve(args.model)
        hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=engine.dtype).to(args.device)
        for n in (1, 8, 32):
            raw[f"hf_n{n}"] = hf_tps(hf, ids, n, args.tokens)
            # Measured again right after HF, so a burst of load from elsewhere hits both alike.
            raw[f"engine_n{n}"] = max(raw[f"engine_n{n}"], engine_tps(engine, ids, n, args.tokens))
            ratio = raw[f"engine_n{n}"] / raw[f"hf_n{n}"]
            print(f"HF         n={n:<3} {raw[f'hf_n{n}']:8.1f} tok/s   engine/HF = {ratio:.2f}x")
        del hf
    gguf = args.model if args.model and args.model.endswith(".gguf") else None
    gguf = gguf or (None if args.model else str(loader.default_model_path()))
    why: str | None = "not a GGUF model on the CPU"
    raw["llamacpp_n8"] = None
    if gguf and args.device == "cpu":
        raw["llamacpp_n8"], why = llamacpp_tps(gguf, 8, args.tokens, torch.get_num_threads())
        raw["engine_n8"] = max(raw["engine_n8"], engine_tps(engine, ids, 8, args.tokens))
    if raw["llamacpp_n8"] is None:
        print(f"llama.cpp  no figure: {why}")
    else:
        print(
            f"llama.cpp  8 sequential {raw['llamacpp_n8']:8.1f} tok/s   "
            f"engine n=8 / llama.cpp = {raw['engine_n8'] / raw['llamacpp_n8']:.2f}x"
        )
    # Each limit is measured right next to the engine figure it divides, so that a burst of load
    # from elsewhere on a shared machine moves both alike.
    raw["engine_n64"] = max(raw["engine_n64"], engine_tps(engine, ids, 64, args.tokens))
    flops = matmul_flops(args.device, engine.dtype)
    raw["engine_n1"] = max(raw["engine_n1"], engine_tps(engine, ids, 1, args.tokens))
    bandwidth = memory_bandwidth(args.device)
    flops_per_token, bytes_per_step, params = model_costs(engine, len(ids) + args.tokens // 2)
    compute_limit, bandwidth_limit = flops / flops_per_token, bandwidth / bytes_per_step
    raw |= {"matmul_gflops": flops / 1e9, "read_bandwidth_gbs": bandwidth / 1e9}
    print(
        f"limits     {flops / 1e9:.0f} GFLOP/s / {flops_per_token / 1e6:.0f} MFLOP per token = "
        f"{compute_limit:.0f} tok/s; {bandwidth / 1e9:.1f} GB/s read / "
        f"{bytes_per_step / 1e6:.0f} MB per step = {bandwidth_limit:.0f} tok/s"
    )
    compute_frac, bandwidth_frac = raw["engine_n64"] / compute_limit, raw["engine_n1"] / bandwidth_limit
    print(f"fraction   n=64 {compute_frac:.0%} of compute limit; n=1 {bandwidth_frac:.0%} of bandwidth limit")
    t1, t64 = matmul_ceiling(engine, 1), matmul_ceiling(engine, 64)
    raw |= {"matmuls_n1_gbs": bytes_per_step / t1 / 1e9, "matmuls_n64_gflops": 64 * 2 * params / t64 / 1e9}
    print(
        f"matmuls    alone: n=1 stream {raw['matmuls_n1_gbs']:.1f} GB/s "
        f"({raw['matmuls_n1_gbs'] * 1e9 / bandwidth:.0%} of read bandwidth), the engine step reaches "
        f"{raw['engine_n1'] * t1:.0%} of that; n=64 {raw['matmuls_n64_gflops']:.0f} GFLOP/s "
        f"({raw['matmuls_n64_gflops'] * 1e9 / flops:.0%} of the matmul limit), the engine step "
        f"{raw['engine_n64'] * t64 / 64:.0%} of that"
    )
    long_ids = list(engine.tokenizer(LONG_PROMPT)["input_ids"])
    t1, t16 = prefill_ratio(engine, long_ids)
    raw |= {"prefill_n1_s": t1, "prefill_n16_s": t16, "prefill_tokens": len(long_ids)}
    print(
        f"prefill    {len(long_ids)} tokens: n=1 {t1 * 1e3:.1f} ms, n=16 {t16 * 1e3:.1f} ms = {t16 / t1:.2f}x"
    )

    def rounded_ratio(a: str, b: str) -> float | None:
        return None if raw.get(b) is None or raw.get(a) is None else round(raw[a] / raw[b], 3)

    summary = {
        "vs_hf_n8": rounded_ratio("engine_n8", "hf_n8"),
        "vs_llamacpp_n8": rounded_ratio("engine_n8", "llamacpp_n8"),
        "compute_frac_n64": round(compute_frac, 3),
        "bandwidth_frac_n1": round(bandwidth_frac, 3),
        "prefill_n16_over_n1": round(t16 / t1, 3),
        "raw": {k: (round(v, 3) if isinstance(v, float) else v) for k, v in raw.items()},
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
