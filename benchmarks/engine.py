"""The engine against HF transformers, llama.cpp and this machine's limits, measured side by side.

For SmolLM2-135M (or ``--model``):

- decode tokens/s at n = 1, 8, 32 against HF ``generate`` (same weights, dtype and prompt);
- aggregate tokens/s for n = 8 (and n = 1) samples against llama.cpp (llama-cpp-python, the same GGUF)
  generating the same samples one after another, in a child process: a baseline that is missing or
  crashes is null in the JSON, with a line saying why;
- fraction of the machine's limit: n = 64 against measured matmul FLOP/s / FLOPs per token,
  n = 1 against measured memory bandwidth / bytes of weights read per step;
- prefill time of one prompt shared by n = 16 against n = 1.

Then, for each model of ``--also`` (default: the capable model, qwen2.5-coder-0.5b, where it is
installed; a line says how to install it where not), the same decode figures at n = 1, 8, 32, the
llama.cpp comparison on its GGUF and the n = 1 bandwidth fraction, with the bytes per step of the
weights as the engine holds them (dequantized to bf16 or fp32 on load).

Every generation runs a fixed number of tokens (EOS ignored). Each figure is the best of
``REPEATS`` runs, and the engine is measured again right after each baseline so that both see the
same load. Options: ``--device cuda``, ``--model PATH|NAME``, ``--also NAME[,NAME]|none``,
``--tokens N``, ``--skip-hf``. The last line printed is JSON: {"vs_hf_n8", "vs_llamacpp_n8",
"compute_frac_n64", "bandwidth_frac_n1", "prefill_n16_over_n1"} (plus the raw figures under "raw"),
and one key per ``--also`` model: its figures, or null where it was skipped.
"""

from __future__ import annotations

import argparse
import gc
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from engine_measure import (
    engine_tps,
    hf_tps,
    matmul_ceiling,
    matmul_flops,
    memory_bandwidth,
    model_costs,
    prefill_ratio,
)
from llamacpp_baseline import llamacpp_tps

from paragen.engine import loader, packaged
from paragen.engine.llm_engine import LLMEngine
from paragen.errors import ConfigError

PROMPT = "Write a short story about a robot who learns to paint. Describe its first painting in detail."
LONG_PROMPT = " ".join(["The history of the printing press begins in the fifteenth century."] * 24)
CAPABLE = packaged.QWEN_CODER.name


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default=None, help="a path, hub id or installed model name")
    parser.add_argument(
        "--also",
        default=CAPABLE,
        help=f"models measured after it, comma-separated, or none (default {CAPABLE})",
    )
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--skip-hf", action="store_true")
    return parser.parse_args(argv)


def also_models(args: argparse.Namespace) -> list[str]:
    """The ``--also`` models, in order, without ``--model`` itself and without repeats."""
    names = [name.strip() for name in args.also.split(",")]
    wanted = [name for name in names if name and name.lower() != "none" and name != args.model]
    return list(dict.fromkeys(wanted))


def missing(target: str) -> str | None:
    """Why ``target`` cannot be loaded here (not installed, no such file), or None where it can."""
    try:
        path = loader.source_path(target)
    except ConfigError as exc:
        return str(exc)
    return None if path.exists() else f"no file at {path}"


def gguf_of(target: str | None) -> Path | None:
    """The GGUF the engine loads for ``target`` (the default model, an installed name, a .gguf path)."""
    path = loader.source_path(target)
    return path if path.suffix == ".gguf" and path.is_file() else None


def load(target: str | None, args: argparse.Namespace) -> tuple[LLMEngine, list[int]]:
    engine = LLMEngine(target, device=args.device, kv_cache_mb=2048)
    print(
        f"\nmodel {target or 'SmolLM2-135M-Instruct'}, {engine.dtype}, {args.device}, "
        f"{torch.get_num_threads()} threads"
    )
    return engine, list(engine.tokenizer(PROMPT)["input_ids"])


def decode(engine: LLMEngine, ids: list[int], ns: Sequence[int], tokens: int, raw: dict[str, Any]) -> None:
    for n in ns:
        raw[f"engine_n{n}"] = engine_tps(engine, ids, n, tokens)
        print(f"engine     n={n:<3} {raw[f'engine_n{n}']:8.1f} tok/s")


def against_hf(
    engine: LLMEngine, target: str | None, ids: list[int], args: argparse.Namespace, raw: dict[str, Any]
) -> None:
    try:
        from transformers import AutoModelForCausalLM

        hf = AutoModelForCausalLM.from_pretrained(loader.resolve(target), dtype=engine.dtype).to(args.device)
    except Exception as exc:  # the HF figure is optional: any failure to load it is reported and skipped
        print(f"HF         no figure: {type(exc).__name__}: {str(exc)[:160]}")
        return
    for n in (1, 8, 32):
        raw[f"hf_n{n}"] = hf_tps(hf, ids, n, args.tokens)
        # Measured again right after HF, so a burst of load from elsewhere hits both alike.
        raw[f"engine_n{n}"] = max(raw[f"engine_n{n}"], engine_tps(engine, ids, n, args.tokens))
        ratio = raw[f"engine_n{n}"] / raw[f"hf_n{n}"]
        print(f"HF         n={n:<3} {raw[f'hf_n{n}']:8.1f} tok/s   engine/HF = {ratio:.2f}x")
    del hf


def against_llamacpp(
    engine: LLMEngine, target: str | None, ids: list[int], args: argparse.Namespace, raw: dict[str, Any]
) -> None:
    gguf = gguf_of(target)
    raw["gguf_mb"] = gguf.stat().st_size / 1e6 if gguf else None
    for n in (1, 8):
        why: str | None = "not a GGUF model on the CPU"
        raw[f"llamacpp_n{n}"] = None
        if gguf and args.device == "cpu":
            threads = torch.get_num_threads()
            raw[f"llamacpp_n{n}"], why = llamacpp_tps(str(gguf), PROMPT, n, args.tokens, threads)
            raw[f"engine_n{n}"] = max(raw[f"engine_n{n}"], engine_tps(engine, ids, n, args.tokens))
        if raw[f"llamacpp_n{n}"] is None:
            print(f"llama.cpp  n={n:<3} no figure: {why}")
            continue
        print(
            f"llama.cpp  {n} sequential {raw[f'llamacpp_n{n}']:8.1f} tok/s   "
            f"engine n={n} / llama.cpp = {raw[f'engine_n{n}'] / raw[f'llamacpp_n{n}']:.2f}x"
        )


def bandwidth_fraction(
    engine: LLMEngine, ids: list[int], args: argparse.Namespace, raw: dict[str, Any]
) -> float:
    """The engine's n = 1 tokens/s over measured read bandwidth / bytes of weights read per step."""
    # The limit is measured right next to the engine figure it divides, so that a burst of load
    # from elsewhere on a shared machine moves both alike.
    raw["engine_n1"] = max(raw["engine_n1"], engine_tps(engine, ids, 1, args.tokens))
    bandwidth = memory_bandwidth(args.device)
    bytes_per_step = model_costs(engine, len(ids) + args.tokens // 2)[1]
    raw |= {"read_bandwidth_gbs": bandwidth / 1e9, "weights_mb_per_step": bytes_per_step / 1e6}
    gguf = f" (its GGUF: {raw['gguf_mb']:.0f} MB)" if raw.get("gguf_mb") else ""
    print(
        f"bandwidth  {bandwidth / 1e9:.1f} GB/s read / {bytes_per_step / 1e6:.0f} MB of {engine.dtype} "
        f"weights per step{gguf} = {bandwidth / bytes_per_step:.0f} tok/s; "
        f"n=1 reaches {raw['engine_n1'] * bytes_per_step / bandwidth:.0%}"
    )
    return float(raw["engine_n1"] * bytes_per_step / bandwidth)


def compute_fraction(
    engine: LLMEngine, ids: list[int], args: argparse.Namespace, raw: dict[str, Any]
) -> float:
    """The engine's n = 64 tokens/s over measured matmul FLOP/s / FLOPs per token."""
    raw["engine_n64"] = max(raw["engine_n64"], engine_tps(engine, ids, 64, args.tokens))
    flops = matmul_flops(args.device, engine.dtype)
    flops_per_token = model_costs(engine, len(ids) + args.tokens // 2)[0]
    raw["matmul_gflops"] = flops / 1e9
    print(
        f"compute    {flops / 1e9:.0f} GFLOP/s / {flops_per_token / 1e6:.0f} MFLOP per token = "
        f"{flops / flops_per_token:.0f} tok/s; n=64 reaches {raw['engine_n64'] * flops_per_token / flops:.0%}"
    )
    return float(raw["engine_n64"] * flops_per_token / flops)


def matmuls_alone(engine: LLMEngine, raw: dict[str, Any]) -> None:
    _, bytes_per_step, params = model_costs(engine, 0)
    t1, t64 = matmul_ceiling(engine, 1), matmul_ceiling(engine, 64)
    raw |= {"matmuls_n1_gbs": bytes_per_step / t1 / 1e9, "matmuls_n64_gflops": 64 * 2 * params / t64 / 1e9}
    of_bandwidth = raw["matmuls_n1_gbs"] / raw["read_bandwidth_gbs"]
    print(
        f"matmuls    alone: n=1 stream {raw['matmuls_n1_gbs']:.1f} GB/s "
        f"({of_bandwidth:.0%} of read bandwidth), the engine step reaches "
        f"{raw['engine_n1'] * t1:.0%} of that; n=64 {raw['matmuls_n64_gflops']:.0f} GFLOP/s "
        f"({raw['matmuls_n64_gflops'] / raw['matmul_gflops']:.0%} of the matmul limit), the engine step "
        f"{raw['engine_n64'] * t64 / 64:.0%} of that"
    )


def ratio(raw: dict[str, Any], a: str, b: str) -> float | None:
    return None if raw.get(b) is None or raw.get(a) is None else round(raw[a] / raw[b], 3)


def rounded(raw: dict[str, Any]) -> dict[str, Any]:
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in raw.items()}


def primary(target: str | None, args: argparse.Namespace) -> dict[str, Any]:
    """Every figure, for the model the benchmark's top-level JSON keys describe."""
    engine, ids = load(target, args)
    raw: dict[str, Any] = {}
    decode(engine, ids, (1, 8, 32, 64), args.tokens, raw)
    if not args.skip_hf:
        against_hf(engine, target, ids, args, raw)
    against_llamacpp(engine, target, ids, args, raw)
    compute_frac = compute_fraction(engine, ids, args, raw)
    bandwidth_frac = bandwidth_fraction(engine, ids, args, raw)
    matmuls_alone(engine, raw)
    long_ids = list(engine.tokenizer(LONG_PROMPT)["input_ids"])
    t1, t16 = prefill_ratio(engine, long_ids)
    raw |= {"prefill_n1_s": t1, "prefill_n16_s": t16, "prefill_tokens": len(long_ids)}
    print(
        f"prefill    {len(long_ids)} tokens: n=1 {t1 * 1e3:.1f} ms, n=16 {t16 * 1e3:.1f} ms = {t16 / t1:.2f}x"
    )
    return {
        "vs_hf_n8": ratio(raw, "engine_n8", "hf_n8"),
        "vs_llamacpp_n8": ratio(raw, "engine_n8", "llamacpp_n8"),
        "compute_frac_n64": round(compute_frac, 3),
        "bandwidth_frac_n1": round(bandwidth_frac, 3),
        "prefill_n16_over_n1": round(t16 / t1, 3),
        "raw": rounded(raw),
    }


def decode_only(target: str, args: argparse.Namespace) -> dict[str, Any]:
    """Decode speed at n = 1, 8, 32 against llama.cpp (and HF), and the n = 1 bandwidth fraction."""
    engine, ids = load(target, args)
    raw: dict[str, Any] = {}
    decode(engine, ids, (1, 8, 32), args.tokens, raw)
    if not args.skip_hf:
        against_hf(engine, target, ids, args, raw)
    against_llamacpp(engine, target, ids, args, raw)
    bandwidth_frac = bandwidth_fraction(engine, ids, args, raw)
    return {
        "dtype": str(engine.dtype).removeprefix("torch."),
        "tokens_per_s": {f"n{n}": round(raw[f"engine_n{n}"], 1) for n in (1, 8, 32)},
        "vs_llamacpp_n1": ratio(raw, "engine_n1", "llamacpp_n1"),
        "vs_llamacpp_n8": ratio(raw, "engine_n8", "llamacpp_n8"),
        "vs_hf_n8": ratio(raw, "engine_n8", "hf_n8"),
        "bandwidth_frac_n1": round(bandwidth_frac, 3),
        "raw": rounded(raw),
    }


def figures_or_skip(name: str, args: argparse.Namespace) -> dict[str, Any] | None:
    """``decode_only``'s figures for ``name``, or None with a line saying why it was skipped."""
    why = missing(name)
    if why is None:
        try:
            return decode_only(name, args)
        except ConfigError as exc:  # a model that will not load costs its figures, not SmolLM2's JSON
            why = str(exc)
    print(f"\nmodel {name} skipped: {why}")
    return None


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    summary = primary(args.model, args)
    for name in also_models(args):
        gc.collect()  # the previous model's weights go before the next one's load
        summary[name] = figures_or_skip(name, args)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
