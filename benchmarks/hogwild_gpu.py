"""Hogwild! on a GPU at a reasoning model's size: Qwen2 models of 7B's and 32B's shape, random weights.

A pass costs the same whatever the weights, so the weights are drawn on the device (a 32B model is
64 GB in bf16: drawn in seconds where reading it from disk would take minutes) and the tokenizer is
a stand-in. The views are ``benchmarks/hogwild.py``'s captures (2 and 4 workers) with the history
lengthened until a view holds ``--views`` tokens. Per shape and view length, one JSON line:

- ``over_batched_2w`` / ``over_batched_4w``: one Hogwild! pass of the workers' views against one
  plain decode step of as many sequences with contexts as long (goals: <= 1.2 / <= 1.3 at 7B);
- ``reencode_cached_over_hogwild``: the workers' tails (past the cached prompt and history)
  prefilled over that prefix, against one Hogwild! pass of the same 2 workers (goal >= 3);
- ``tokens_per_s_per_worker`` with 1, 2 and 4 workers, beside ``plain_tokens_per_s`` of one plain
  sequence with the same context; ``memory``: the weights, a token's K/V, and the cache each worker
  holds (Hogwild!: the session's segments over its workers; plain: a whole context each).

Run on a GPU machine from the repository root: ``python3 benchmarks/hogwild_gpu.py --shapes 7b 32b``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
import hogwild as bench

from paragen.engine import loader
from paragen.engine.llm_engine import LLMEngine
from paragen.types import SamplingParams

QWEN2 = {"architectures": ["Qwen2ForCausalLM"], "vocab_size": 152064, "rms_norm_eps": 1e-6}
SHAPES: dict[str, dict[str, Any]] = {  # Qwen2.5-7B's and QwQ-32B's config.json numbers
    "7b": {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
           "num_attention_heads": 28, "num_key_value_heads": 4},
    "32b": {"hidden_size": 5120, "intermediate_size": 27648, "num_hidden_layers": 64,
            "num_attention_heads": 40, "num_key_value_heads": 8},
    "tiny": {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,  # the script's dry run
             "num_attention_heads": 4, "num_key_value_heads": 2},
}  # fmt: skip


class RandomWeights(Mapping[str, torch.Tensor]):
    """A Qwen2 checkpoint's tensors drawn on the device as the model takes them (each once)."""

    def __init__(self, hf: dict[str, Any], device: str):
        h, inter, d = (
            hf["hidden_size"],
            hf["intermediate_size"],
            hf["hidden_size"] // hf["num_attention_heads"],
        )
        q, kv = hf["num_attention_heads"] * d, hf["num_key_value_heads"] * d
        self.shapes: dict[str, tuple[int, ...]] = {
            "model.embed_tokens.weight": (hf["vocab_size"], h),
            "lm_head.weight": (hf["vocab_size"], h),
            "model.norm.weight": (h,),
        }
        for i in range(hf["num_hidden_layers"]):
            p = f"model.layers.{i}."
            for name, rows in (("q", q), ("k", kv), ("v", kv)):
                self.shapes[f"{p}self_attn.{name}_proj.weight"] = (rows, h)
                self.shapes[f"{p}self_attn.{name}_proj.bias"] = (rows,)
            self.shapes[f"{p}self_attn.o_proj.weight"] = (h, q)
            self.shapes[f"{p}mlp.gate_proj.weight"] = (inter, h)
            self.shapes[f"{p}mlp.up_proj.weight"] = (inter, h)
            self.shapes[f"{p}mlp.down_proj.weight"] = (h, inter)
            self.shapes[f"{p}input_layernorm.weight"] = (h,)
            self.shapes[f"{p}post_attention_layernorm.weight"] = (h,)
        self.device = device

    def __getitem__(self, name: str) -> torch.Tensor:
        shape = self.shapes[name]
        if name.endswith("norm.weight"):
            return torch.ones(shape, dtype=torch.bfloat16, device=self.device)
        return torch.randn(shape, dtype=torch.bfloat16, device=self.device) * 0.02

    def __contains__(self, name: object) -> bool:
        return name in self.shapes

    def __iter__(self) -> Iterator[str]:
        return iter(self.shapes)

    def __len__(self) -> int:
        return len(self.shapes)


class StandInTokenizer:
    """Enough of a tokenizer for the engine and the benchmark: ids from text, no text from ids."""

    eos_token_id = None

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [100 + ord(ch) for ch in text]}

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return ""


def engine_of(shape: str, device: str, kv_cache_mb: int) -> LLMEngine:
    hf = {**QWEN2, **SHAPES[shape], "max_position_embeddings": 32768, "rope_theta": 1e6}
    folder = Path(tempfile.mkdtemp(prefix=f"qwen2-{shape}-"))
    (folder / "config.json").write_text(json.dumps(hf))
    loader.Checkpoint = lambda model_dir, dev="cpu": RandomWeights(hf, device)  # type: ignore[assignment,misc,return-value]
    loader.load_tokenizer = lambda model_dir: StandInTokenizer()
    return LLMEngine(str(folder), dtype="bfloat16", device=device, kv_cache_mb=kv_cache_mb)


def lengthened(capture: dict[str, Any], view_tokens: int) -> dict[str, Any]:
    """The capture with its history (the view's second segment) grown so a view holds ``view_tokens``."""
    lengths = dict(capture["lengths"])
    view = capture["views"][0]
    history = str(view[1])
    lengths[history] += view_tokens - sum(lengths[str(s)] for s in view)
    if lengths[history] <= 0:
        raise SystemExit(f"views of {view_tokens} tokens are shorter than the captured ones")
    return {**capture, "lengths": lengths}


def measure(engine: LLMEngine, captures: dict[int, dict[str, Any]], view_tokens: int) -> dict[str, Any]:
    raw: dict[str, float] = {}
    for n in (1, 2, 4):
        hog, plain = bench.over_batched(engine, lengthened(captures[n], view_tokens))
        raw |= {f"hogwild_{n}w_ms": hog, f"plain_{n}seq_ms": plain}
    hog, reencode, tail = bench.reencode_over_hogwild(engine, lengthened(captures[2], view_tokens))
    raw |= {"hogwild_2w_ms_again": hog, "reencode_cached_2w_ms": reencode, "tail_tokens": tail}
    memory = engine.memory()
    per_token = memory["kv_per_token"]
    per_worker = {  # a session's cache over its workers; plain: each sequence its whole context
        f"hogwild_{n}w": _session_tokens(captures[n], view_tokens) * per_token // n for n in (2, 4)
    }
    return {
        "over_batched_2w": round(raw["hogwild_2w_ms"] / raw["plain_2seq_ms"], 3),
        "over_batched_4w": round(raw["hogwild_4w_ms"] / raw["plain_4seq_ms"], 3),
        "reencode_cached_over_hogwild": round(raw["reencode_cached_2w_ms"] / raw["hogwild_2w_ms_again"], 2),
        "tokens_per_s_per_worker": {f"{n}w": round(1000 / raw[f"hogwild_{n}w_ms"], 1) for n in (1, 2, 4)},
        "plain_tokens_per_s": round(1000 / raw["plain_1seq_ms"], 1),
        "memory_gb": {
            "weights": round(memory["weights"] / 1e9, 2),
            "kv_per_token_kb": round(per_token / 1e3, 1),
            **{f"cache_per_worker_{k}": round(v / 1e9, 3) for k, v in per_worker.items()},
            "cache_per_plain_seq": round(view_tokens * per_token / 1e9, 3),
        },
        "raw": {k: round(v, 2) for k, v in raw.items()},
    }


def _session_tokens(capture: dict[str, Any], view_tokens: int) -> int:
    return sum(lengthened(capture, view_tokens)["lengths"].values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=["7b", "32b"], choices=sorted(SHAPES))
    parser.add_argument("--views", nargs="+", type=int, default=[2048, 8192], help="tokens in a view")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--kv-cache-mb", type=int, default=16384)
    args = parser.parse_args()
    bench.PARAMS = SamplingParams(max_tokens=100_000, temperature=0.0, seed=0)  # random weights: greedy
    captures = {n: json.loads((bench.VIEWS / f"{n}w.json").read_text())["last"] for n in (2, 4)}
    captures[1] = {**captures[2], "views": captures[2]["views"][:1]}
    for shape in args.shapes:
        engine = engine_of(shape, args.device, args.kv_cache_mb)
        name = torch.cuda.get_device_name() if args.device == "cuda" else args.device
        rounds, bench.ROUNDS, bench.STEPS = (bench.ROUNDS, bench.STEPS), 1, 2
        measure(engine, captures, args.views[0])  # untimed: the kernels compiled, the clocks up
        bench.ROUNDS, bench.STEPS = rounds
        for view_tokens in args.views:
            result = measure(engine, captures, view_tokens)
            print(
                json.dumps({"shape": shape, "view_tokens": view_tokens, "device": name, **result}), flush=True
            )
        del engine
        if args.device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
