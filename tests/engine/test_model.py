"""Greedy fp32 decoding must equal HF transformers token for token."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers

from paragen.engine import loader
from paragen.engine.llm_engine import LLMEngine
from paragen.engine.model import Model
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


def test_packed_bf16_weights_change_nothing(tiny_llama: Path) -> None:
    engine = LLMEngine(str(tiny_llama), dtype="bfloat16", num_blocks=64)
    prompts = [engine.tokenizer(p)["input_ids"] for p in PROMPTS[:2]]
    packed = engine_greedy(engine, prompts, 16)
    plain = Model(engine.cfg, loader.load_tensors(tiny_llama), torch.bfloat16, "cpu", pack=False)
    engine.model = engine.runner.model = plain
    assert engine_greedy(engine, prompts, 16) == packed
