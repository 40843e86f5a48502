"""Hogwild! sessions in their steady state against HF transformers, every pass.

Teacher-forced runs of 2 and 3 workers in the combined and interleaved layouts: one-token rows
beside step-boundary rows (the last token and a header), finished steps folded into the history
segment (``append_from``), views of 20+ steps and 1.5k+ tokens. The reference keeps its own record
of every folded step (its keys as first written, with the positions they were written at), so the
fold's re-rotation is checked too, and rebuilds each row's view as HF ``past_key_values`` whose keys
are rotated to their view positions (the key-rotation form of tests/engine/test_hogwild.py).
"""

from __future__ import annotations

import inspect
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
import transformers
from conftest import DEVICE
from test_hogwild import Reference
from transformers.models.llama.modeling_llama import rotate_half

from paragen.engine.hogwild.session import EngineSharedSession
from paragen.engine.llm_engine import LLMEngine
from paragen.types import SamplingParams, SharedRow

GREEDY = SamplingParams(max_tokens=64, temperature=0.0)
PROMPT_TOKENS = 1450
MIN_STEPS = 20


@dataclass
class Chunk:
    """Tokens' K/V as first written ([layers, 2 * kv_heads, n, D]) and the positions their keys hold."""

    kv: torch.Tensor
    positions: torch.Tensor


@dataclass
class Record:
    """The reference's own copy of the history segment: the chunks folded into it, in order."""

    chunks: dict[int, list[Chunk]] = field(default_factory=dict)

    def snapshot(self, session: EngineSharedSession, seg: int) -> Chunk:
        slots = session.slots(seg)
        base = session.base(seg) or 0
        return Chunk(session.engine.cache.kv[:, :, slots].float().cpu(), torch.arange(len(slots)) + base)

    def fold(self, session: EngineSharedSession, dst: int, src: int) -> None:
        if dst not in self.chunks:
            self.chunks[dst] = [self.snapshot(session, dst)]
        self.chunks[dst].append(self.snapshot(session, src))
        session.append_from(dst, src)
        assert session.length(dst) == sum(c.kv.shape[2] for c in self.chunks[dst])

    def read(self, session: EngineSharedSession, seg: int, length: int) -> Chunk:
        """The segment's first ``length`` tokens as written (folded ones from the record)."""
        if seg in self.chunks:
            kv = torch.cat([c.kv for c in self.chunks[seg]], dim=2)
            positions = torch.cat([c.positions for c in self.chunks[seg]])
        else:
            whole = self.snapshot(session, seg)
            kv, positions = whole.kv, whole.positions
        return Chunk(kv[:, :, :length], positions[:length])


def reference_logits(
    ref: Reference, record: Record, session: EngineSharedSession, row: SharedRow
) -> torch.Tensor:
    """HF's logits at the row's last token: the view's keys rotated from where they are to their places."""
    nkv = session.engine.cfg.num_kv_heads
    own_before = session.length(row.view[-1]) - len(row.token_ids)  # the pass already wrote the row
    parts = [record.read(session, s, session.length(s)) for s in row.view[:-1]]
    parts.append(record.read(session, row.view[-1], own_before))
    kv = torch.cat([p.kv for p in parts], dim=2)
    shifts = torch.arange(kv.shape[2]) - torch.cat([p.positions for p in parts])
    cos, sin = ref.model.model.rotary_emb(kv, shifts.unsqueeze(0))
    past = transformers.DynamicCache()
    for layer in range(kv.shape[0]):
        k, v = kv[layer, :nkv], kv[layer, nkv:]
        k = k * cos[0] + rotate_half(k) * sin[0]  # type: ignore[no-untyped-call]
        past.update(k.unsqueeze(0), v.unsqueeze(0), layer)
    cache_arg = "cache" if "cache" in inspect.signature(ref.model.forward).parameters else "past_key_values"
    out = ref.model(torch.tensor([list(row.token_ids)]), use_cache=True, **{cache_arg: past})
    logits: torch.Tensor = out.logits[0, -1]
    return logits


@dataclass
class Worker:
    segment: int
    pending: list[int]
    left: int  # tokens until its step ends


def run_session(model_dir: Path, workers: int, layout: str, dtype: str) -> float:
    """The largest logit difference to the reference over every row of every pass."""
    rng = random.Random(workers * 10 + len(layout))
    engine = LLMEngine(str(model_dir), dtype=dtype, device=DEVICE, num_blocks=400, block_size=16)
    ref, record = Reference(model_dir), Record()
    session = EngineSharedSession(engine, GREEDY, num_workers=workers)

    def text(n: int) -> list[int]:
        return [rng.randrange(300, 20000) for _ in range(n)]

    prompt, past, others, own_header = (session.new_segment() for _ in range(4))
    cuts = [session.new_segment() for _ in range(workers - 1)]
    session.logits([SharedRow(0, [prompt], text(PROMPT_TOKENS))])
    headers = [past, others, own_header, *cuts]
    session.logits([SharedRow(i, [prompt, s], text(3)) for i, s in enumerate(headers[:workers])])
    for s in headers[workers:]:
        session.logits([SharedRow(0, [prompt, s], text(2))])
    team = [Worker(session.new_segment(), text(8), rng.randrange(2, 7)) for _ in range(workers)]

    def view(i: int) -> list[int]:
        if layout == "interleaved":
            return [prompt, past, team[i].segment]
        mid = [x for j, w in enumerate(team) if j != i for x in (w.segment, cuts[j - (j > i)])]
        return [prompt, past, others, *mid, own_header, team[i].segment]

    steps, worst = 0, 0.0
    while steps < MIN_STEPS or sum(session.length(s) for s in view(0)) < 1500:
        rows = [SharedRow(i, view(i), w.pending) for i, w in enumerate(team)]
        got = session.logits(rows).float().cpu()
        for i, row in enumerate(rows):
            want = reference_logits(ref, record, session, row)
            worst = max(worst, (got[i] - want).abs().max().item())
        for w in team:
            w.left -= 1
            w.pending = text(1)
            if w.left == 0:  # the step ends: fold it into the history, start the next with a header
                record.fold(session, past, w.segment)
                session.free_segment(w.segment)
                w.segment, w.left, steps = session.new_segment(), rng.randrange(2, 7), steps + 1
                w.pending += text(4)
    assert len(view(0)) <= 2 * workers + 3  # bounded: however many steps were folded
    session.close()
    assert engine.num_free_blocks == 400
    return worst


@pytest.mark.usefixtures("attention_path")
@pytest.mark.parametrize("layout", ["combined", "interleaved"])
@pytest.mark.parametrize("workers", [2, 3])
def test_steady_state_matches_hf_fp32(long_llama: Path, workers: int, layout: str) -> None:
    assert run_session(long_llama, workers, layout, "float32") < FP32_ATOL


@pytest.mark.usefixtures("attention_path")
@pytest.mark.parametrize("layout", ["combined", "interleaved"])
def test_steady_state_matches_hf_bf16(long_llama: Path, layout: str) -> None:
    # bf16 weights, activations and cache against an fp32 forward over the same (bf16) K/V
    assert run_session(long_llama, 2, layout, "bfloat16") < BF16_ATOL


# Logits of magnitude ~10 over 1.5k-token views, head size 64: every attention measures 1.4-1.6e-3
# (the 3-segment tests, head size 16, hold 1e-4).
FP32_ATOL = 3e-3
# bf16 weights and cache: on a CPU the torch attention of a batch this small runs in fp32 (0.21 /
# 0.26, combined / interleaved), the fused kernel with AVX512-BF16 takes products of bf16 pairs
# (0.28 / 0.27; widened to fp32 without BF16: 0.22 / 0.27); on CUDA attention runs in bf16, scores
# and probabilities rounded over 1.5k-token views (0.31-0.53 on an H100, head size 16).
BF16_ATOL = 0.35 if DEVICE == "cpu" else 0.6
