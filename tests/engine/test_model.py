"""Greedy fp32 decoding must equal HF transformers token for token."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers

from paragen.engine import loader
from paragen.engine.llm_engine import LLMEngine
from paragen.engine.model import Model, can_pack
from paragen.types import SamplingParams

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "Question: What is 17 times 3?\nAnswer:",
    "Water boils at",
]


def hf_greedy(model_dir: Path, prompts: list[list[int]], num_tokens: int) -> list[list[int]]:
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    outs = []
    for ids in prompts:
        out = model.generate(  # type: ignore[misc]  # transformers' self-typed mixin method
            torch.tensor([ids]), max_new_tokens=num_tokens, do_sample=False, top_p=None, top_k=None
        )
        outs.append(out[0, len(ids) :].tolist())
    return outs


def engine_greedy(engine: LLMEngine, prompts: list[list[int]], num_tokens: int) -> list[list[int]]:
    results = engine.generate(prompts, SamplingParams(max_tokens=num_tokens, temperature=0.0))
    return [samples[0] for samples in results]


def check_equal(model_dir: Path, num_tokens: int) -> None:
    engine = LLMEngine(str(model_dir), dtype="float32", num_blocks=64)
    prompts = [engine.tokenizer(p)["input_ids"] for p in PROMPTS]
    ours = engine_greedy(engine, prompts, num_tokens)
    theirs = hf_greedy(model_dir, prompts, num_tokens)
    assert ours == theirs
    assert engine.num_free_blocks == 64


def test_tiny_llama_matches_hf(tiny_llama: Path) -> None:
    check_equal(tiny_llama, 32)


def test_tiny_qwen2_matches_hf(tiny_qwen2: Path) -> None:
    check_equal(tiny_qwen2, 32)


@pytest.mark.slow
def test_smollm2_matches_hf(smol_dir: Path) -> None:
    check_equal(smol_dir, 64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_packed_weights_change_nothing(tiny_llama: Path, dtype: torch.dtype) -> None:
    if not can_pack(torch.device("cpu"), dtype):
        pytest.skip(f"oneDNN packs no {dtype} weights on this CPU")
    engine = LLMEngine(str(tiny_llama), dtype=str(dtype).removeprefix("torch."), num_blocks=64)
    assert engine.model.is_packed
    prompts = [engine.tokenizer(p)["input_ids"] for p in PROMPTS[:2]]
    packed = engine_greedy(engine, prompts, 16)
    plain = Model(engine.cfg, loader.load_tensors(tiny_llama), dtype, "cpu", pack=False)
    assert not plain.is_packed
    engine.model = engine.runner.model = plain
    assert engine_greedy(engine, prompts, 16) == packed


def test_sharded_qwen2_loads_and_matches_hf(tiny_qwen2: Path, tmp_path: Path) -> None:
    """A checkpoint in several safetensors shards (as QwQ-32B's 17) is read tensor by tensor, each
    from its shard, and decodes as HF transformers does; the engine reports its memory."""
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_qwen2, dtype=torch.float32)
    sharded = tmp_path / "sharded"
    model.save_pretrained(sharded, max_shard_size="400KB")
    transformers.AutoTokenizer.from_pretrained(tiny_qwen2).save_pretrained(sharded)
    assert (
        len(list(sharded.glob("*.safetensors"))) >= 3 and (sharded / "model.safetensors.index.json").exists()
    )
    checkpoint = loader.Checkpoint(sharded)
    state = model.state_dict()
    assert set(checkpoint) == set(state) and "model.layers.0.self_attn.q_proj.bias" in checkpoint
    for name in checkpoint:
        assert torch.equal(checkpoint[name], state[name]), name
    check_equal(sharded, 16)
    engine = LLMEngine(str(sharded), dtype="float32", num_blocks=8, block_size=16)
    memory = engine.memory()
    assert memory["weights"] == sum(
        t.numel() * 4 for n, t in state.items() if "norm" not in n and "bias" not in n
    )
    cfg = engine.cfg
    assert memory["kv_per_token"] == 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 4
    assert memory["kv_cache"] == 8 * 16 * memory["kv_per_token"]
