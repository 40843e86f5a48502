"""Qwen3 and Qwen3-MoE in the engine against HF transformers: every step's logits, greedy text,
Hogwild!.

Qwen3 normalises each query and key head (RMSNorm over head_dim, weights of its own) before RoPE;
the fixture's norm weights are random, so a norm skipped, swapped or applied after RoPE shows in the
logits. Its head_dim (32) is not hidden / heads (16), as in the real models.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
import transformers
from test_model import PROMPTS, check_equal

from paragen.engine import loader, model_config
from paragen.engine.hogwild.session import EngineSharedSession
from paragen.engine.llm_engine import LLMEngine
from paragen.engine.sampler import Sampled
from paragen.engine.sequence import Sequence
from paragen.errors import ConfigError
from paragen.types import SamplingParams, SharedRow

# Largest logit difference from HF transformers in fp32 allowed for every step of every row (the
# engine's stated tolerance, docs/engine.md). fp32: rounding of sums taken in another order. bf16:
# every activation rounded to 8 mantissa bits, against HF's fp32 logits (tiny Qwen3 logits reach
# about +-10 here, where a bf16 step is 0.03-0.06).
TOLERANCE = {"float32": 1e-4, "bfloat16": 0.5}
STEPS = 12
TinyModel = Callable[..., Path]  # the root conftest's builder


@pytest.mark.parametrize("model", ["tiny_qwen3", "tiny_qwen3_moe"])
def test_greedy_matches_hf(model: str, request: pytest.FixtureRequest) -> None:
    check_equal(request.getfixturevalue(model), 32)


def test_folded_scale_and_tied_embeddings_match_hf(tiny_qwen3_with: TinyModel) -> None:
    """head_dim 64: the softmax scale (1/8) is folded into the query heads' norm weights; the
    embeddings are the output head."""
    model_dir = tiny_qwen3_with("qwen3_tied", head_dim=64, tie_word_embeddings=True)
    assert loader.load_config(model_dir).tie_word_embeddings
    check_equal(model_dir, 16)


@dataclass
class Decoded:
    """A batch decoded greedily: each row's completion, the logits of every step of every row as
    (row, tokens it has seen, logits), and each forward's tokens as (row, position)."""

    completions: list[list[int]] = field(default_factory=list)
    logits: list[tuple[int, int, torch.Tensor]] = field(default_factory=list)
    forwards: list[list[tuple[int, int]]] = field(default_factory=list)


def engine_steps(engine: LLMEngine, prompts: list[list[int]]) -> Decoded:
    """``prompts`` decoded greedily together, every forward's logits recorded."""
    decoded, rows, order = Decoded(), list[tuple[int, int]](), dict[int, int]()
    run, logits = engine.runner.run, engine.model.logits

    def recording_run(seqs: list[Sequence], is_prefill: bool) -> Sampled:
        rows[:] = [(order[s.seq_id], s.num_tokens) for s in (seqs[:1] if is_prefill else seqs)]
        if is_prefill:  # one row's uncached tokens
            row, first, n = rows[0][0], seqs[0].num_cached_tokens, seqs[0].num_tokens
            decoded.forwards.append([(row, position) for position in range(first, n)])
        else:  # each row's newest token
            decoded.forwards.append([(row, n - 1) for row, n in rows])
        return run(seqs, is_prefill)

    def recording_logits(hidden: torch.Tensor) -> torch.Tensor:
        out = logits(hidden)
        decoded.logits.extend((i, n, row.clone()) for (i, n), row in zip(rows, out, strict=True))
        return out

    engine.runner.run, engine.model.logits = recording_run, recording_logits  # type: ignore[method-assign]
    for i, prompt in enumerate(prompts):
        (seq_id,) = engine.add_request(prompt, SamplingParams(max_tokens=STEPS, temperature=0.0))
        order[seq_id] = i
    done: dict[int, list[int]] = {i: [] for i in order}
    while not engine.is_idle:
        for out in engine.step():
            done[out.seq_id].append(out.token_id)
    decoded.completions = list(done.values())
    return decoded


def hf_logits(model_dir: Path, tokens: list[list[int]]) -> list[torch.Tensor]:
    """HF transformers' fp32 logits at every position of each token list."""
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        return [model(torch.tensor([ids])).logits[0] for ids in tokens]


def check_steps(model_dir: Path, dtype: str) -> tuple[Decoded, list[list[int]], list[float]]:
    """Five prompts of different lengths decoded together in ``dtype``; each row's prefill and its
    decode steps (keys read back from the paged cache) against HF's fp32 logits over the same tokens.
    Returns the decode, the prompts, and each step's largest logit difference."""
    engine = LLMEngine(str(model_dir), dtype=dtype, num_blocks=64, block_size=4)
    prompts = [list(engine.tokenizer(p)["input_ids"]) for p in PROMPTS]
    decoded = engine_steps(engine, prompts)
    assert all(len(c) == STEPS for c in decoded.completions) and len(decoded.logits) == STEPS * len(prompts)
    reference = hf_logits(model_dir, [p + c for p, c in zip(prompts, decoded.completions, strict=True)])
    if dtype == "float32":  # greedy tokens are HF's own
        assert all(int(row.argmax()) == int(reference[i][n - 1].argmax()) for i, n, row in decoded.logits)
    assert engine.num_free_blocks == 64
    return decoded, prompts, [float((row - reference[i][n - 1]).abs().max()) for i, n, row in decoded.logits]


@pytest.mark.parametrize("attention", ["fused", "torch"])
@pytest.mark.parametrize(
    ("model", "dtype"), [("tiny_qwen3", "float32"), ("tiny_qwen3", "bfloat16"), ("tiny_qwen3_moe", "float32")]
)
def test_every_steps_logits_within_tolerance_of_hf(
    model: str, dtype: str, attention: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """The fused kernel reads each row's keys where they lie, the torch attention gathers and pads
    them; both within the stated tolerance at every step (Qwen3-MoE in bf16: test_qwen3_moe.py)."""
    monkeypatch.setenv("PARAGEN_FUSED_ATTENTION", "1" if attention == "fused" else "0")
    _, _, differences = check_steps(request.getfixturevalue(model), dtype)
    assert max(differences) <= TOLERANCE[dtype], max(differences)


def test_one_hogwild_worker_is_the_plain_decode(tiny_qwen3: Path) -> None:
    """A one-worker shared session (queries rotated inside the shared attention) decodes as the
    plain request does, in fp32 token for token."""
    engine = LLMEngine(str(tiny_qwen3), dtype="float32", num_blocks=64, block_size=4)
    prompt = list(engine.tokenizer(PROMPTS[2])["input_ids"])
    ((plain,),) = engine.generate([prompt], SamplingParams(max_tokens=STEPS, temperature=0.0))
    session = EngineSharedSession(engine, SamplingParams(temperature=0.0), 1)
    segment = session.new_segment()
    try:
        logits = session.logits([SharedRow(0, [segment], prompt)])[0]
        tokens = [int(logits.argmax())]
        for _ in range(STEPS - 1):
            tokens.append(int(session.logits([SharedRow(0, [segment], tokens[-1:])])[0].argmax()))
    finally:
        session.close()
    assert tokens == plain
    assert engine.num_free_blocks == 64


def test_unsupported_qwen3_variants_are_refused_in_one_line(tiny_qwen3: Path) -> None:
    hf = loader.load_hf_config(tiny_qwen3)
    bad: list[tuple[dict[str, object], str]] = [
        ({"use_sliding_window": True}, "sliding-window attention is not supported"),
        ({"attention_bias": True}, "attention_bias is not supported"),
    ]
    for fields, message in bad:
        with pytest.raises(ConfigError, match=message):
            model_config.ModelConfig.from_hf({**hf, **fields})
