"""Decode attention over gathered cache blocks against a plain per-row reference."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from paragen.engine.attention import SMALL_BATCH, decode_attention
from paragen.engine.cache import KVCache
from paragen.engine.kernels import fused
from paragen.engine.model_runner import ModelRunner
from paragen.engine.sequence import SeqParams, Sequence

HEADS, KV_HEADS, HEAD_DIM, BLOCK, BLOCKS = 6, 2, 16, 4, 64


def make_rows(batch: int, rng: random.Random) -> list[Sequence]:
    """Rows of different lengths whose views share a first block and otherwise scatter."""
    params = SeqParams(max_tokens=1, temperature=0.0, top_p=1.0, top_k=0, seed=0)
    free = list(range(1, BLOCKS))
    rng.shuffle(free)
    rows = []
    for _ in range(batch):
        length = rng.randint(1, 5 * BLOCK)
        table = [0] + [free.pop() for _ in range(-(-length // BLOCK) - 1)]
        seq = Sequence(list(range(length)), length, params, detok=None)  # type: ignore[arg-type]
        seq.block_table, seq.num_cached_tokens = table, length - 1  # the row's new token is the last
        rows.append(seq)
    return rows


def reference(row: Sequence, q: torch.Tensor, kv: torch.Tensor, scale: float) -> torch.Tensor:
    slots = [row.block_table[p // BLOCK] * BLOCK + p % BLOCK for p in range(row.num_cached_tokens + 1)]
    keys, values = kv[:KV_HEADS, slots].float(), kv[KV_HEADS:, slots].float()
    group = HEADS // KV_HEADS
    keys, values = keys.repeat_interleave(group, 0), values.repeat_interleave(group, 0)
    probs = torch.softmax(q.float().unsqueeze(1) @ keys.transpose(1, 2) * scale, dim=-1)
    return (probs @ values).reshape(-1)


@pytest.mark.parametrize("batch", [1, 5, SMALL_BATCH + 4])  # fp32 path, and the bf16 path past SMALL_BATCH
def test_decode_attention_matches_per_row_reference(batch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The torch decode (fp32 and bf16 matmuls)."""
    monkeypatch.setenv("PARAGEN_FUSED_ATTENTION", "0")
    check_decode(batch, "torch", HEAD_DIM)


@pytest.mark.parametrize("head_dim", [HEAD_DIM, 64])
@pytest.mark.parametrize("batch", [1, 5, SMALL_BATCH + 4])
def test_fused_decode_attention_matches_per_row_reference(
    batch: int, head_dim: int, kernel_build: str
) -> None:
    """The fused kernel: its plain path, and at head_dim 64 the vector path of the CPU it is built for."""
    if not fused.enabled(torch.device("cpu"), torch.bfloat16):
        pytest.skip("no C compiler: the fused attention is not built")
    check_decode(batch, "fused", head_dim)


def check_decode(batch: int, kernel: str, head_dim: int) -> None:
    torch.manual_seed(batch)
    cfg: Any = SimpleNamespace(num_layers=1, num_kv_heads=KV_HEADS, head_dim=head_dim)
    cache = KVCache(cfg, BLOCKS, BLOCK, torch.bfloat16, "cpu")
    cache.kv.normal_()
    runner = ModelRunner(SimpleNamespace(device=torch.device("cpu")), cache)  # type: ignore[arg-type]
    rows = make_rows(batch, random.Random(batch))
    _, _, meta = runner.prepare_decode(rows)
    qkv = torch.randn(batch, HEADS + 2 * KV_HEADS, head_dim, dtype=torch.bfloat16)
    if kernel == "fused":
        assert meta.fused_reads is not None and meta.gather is None
        attend = fused.attention(meta.fused_reads, num_heads=HEADS, num_kv_heads=KV_HEADS, scale=0.3)
    else:
        assert meta.mask is not None and meta.fused_reads is None  # different lengths: padding is masked
        attend = decode_attention(
            meta, num_heads=HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM, scale=0.3, dtype=torch.bfloat16
        )
    got = attend(qkv, cache.kv[0]).float()
    want = torch.stack([reference(row, qkv[i, :HEADS], cache.kv[0], 0.3) for i, row in enumerate(rows)])
    torch.testing.assert_close(got, want, atol=3e-2, rtol=3e-2)
