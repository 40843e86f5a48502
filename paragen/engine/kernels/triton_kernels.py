# mypy: disable-error-code="no-untyped-def"
"""The Triton kernels of the engine's attention on CUDA (``triton_attention.py`` launches them).

``partial`` scores one class of query tokens (a Hogwild! session's workers, or one row's tokens)
against one split of the class's list of cache slots, for one KV head: each key and value is loaded
once for every token and query head of the class (the rows of one score matmul). A key of the
class's ``j``-th run of slots is scored by each token's query rotated by that token's ``j``-th
rotation (its view position turned back by its shift of the run), so a tile of keys costs one score
matmul per run it touches, not one per rotation of every token (``paged_attention.c`` chooses the
rotation key by key; a GPU wants matmuls). Softmax is online, in fp32, per split; ``combine``
joins the splits (flash-decoding), or ``partial`` writes the output itself when there is one split.

The functions are plain Python here, wrapped by ``triton.jit`` on first use (``kernels``), so this
module imports where Triton does even if the kernel never runs.
"""

from __future__ import annotations

import functools
from typing import Any

import triton
import triton.language as tl

NEG = tl.constexpr(
    -1.0e30
)  # a running maximum's start: finite, so a row that has seen no key yet gives exp(-inf) = 0


def _partial(
    kv,  # [2 * kv_heads, num_slots, D]: this layer's cache
    qkv,  # [tokens, heads + 2 * kv_heads, D]: token t's queries are its first ``heads`` rows
    cos,  # [rotations, D] fp32 (ROTATE): token t's j-th rotation is row rot_base[t] + j
    sin,
    key_slots,  # [K] int32: each class's slots, class after class
    key_run,  # [K] int32: each slot's run within its class (which rotation scores it)
    class_keys,  # [C] int32: where the class's slots begin in key_slots
    class_tokens,  # [tokens] int32: the tokens, class after class
    class_start,  # [C + 1] int32
    key_count,  # [tokens] int32: how many of its class's slots token t reads (the first ones)
    rot_base,  # [tokens] int32
    part_m,  # [splits, tokens, heads] fp32
    part_l,
    part_acc,  # [splits, tokens, heads, D] fp32
    out,  # [tokens, heads * D] in the activations' dtype (FINAL: one split, written here)
    num_slots,
    qkv_row,
    num_tokens,
    split,
    scale,
    HEADS: tl.constexpr,
    KV_HEADS: tl.constexpr,
    GROUP: tl.constexpr,
    D: tl.constexpr,
    TOKENS: tl.constexpr,
    GROUP_P: tl.constexpr,
    DP: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROTATE: tl.constexpr,
    F32: tl.constexpr,  # fp32 matmuls (an fp32 cache; Triton's interpreter, whose bf16 dot is wrong)
    FINAL: tl.constexpr,
):
    sp, c, h = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rows = tl.arange(0, TOKENS * GROUP_P)
    t, g = rows // GROUP_P, rows % GROUP_P
    first = tl.load(class_start + c)
    n_tok = tl.load(class_start + c + 1) - first
    row_ok = (t < n_tok) & (g < GROUP)
    tok = tl.load(class_tokens + first + t, mask=t < n_tok, other=0)
    count = tl.load(key_count + tok, mask=row_ok, other=0)
    keys0 = tl.load(class_keys + c)
    d = tl.arange(0, DP)
    d_ok = d < D
    head = h * GROUP + g
    q_at = qkv + tok.to(tl.int64)[:, None] * qkv_row + head[:, None] * D
    q_ok = row_ok[:, None] & d_ok[None, :]
    q = tl.load(q_at + d[None, :], mask=q_ok, other=0.0).to(tl.float32)
    qs = q
    base = tl.load(rot_base + tok, mask=row_ok, other=0)
    if ROTATE:  # rotate_half(q) * sin == q with its halves swapped, times the signed sin
        qs = tl.load(q_at + ((d + D // 2) % D)[None, :], mask=q_ok, other=0.0).to(tl.float32)
    lo = sp * split
    hi = tl.minimum(lo + split, tl.max(count, 0))
    m_i = tl.full([TOKENS * GROUP_P], NEG, tl.float32)
    l_i = tl.zeros([TOKENS * GROUP_P], tl.float32)
    acc = tl.zeros([TOKENS * GROUP_P, DP], tl.float32)
    for k0 in range(lo, hi, BLOCK_N):
        n = k0 + tl.arange(0, BLOCK_N)
        n_ok = n < hi
        slot = tl.load(key_slots + keys0 + n, mask=n_ok, other=0).to(tl.int64)
        kv_ok = n_ok[:, None] & d_ok[None, :]
        k = tl.load(kv + (h * num_slots + slot)[:, None] * D + d[None, :], mask=kv_ok, other=0.0)
        v = tl.load(kv + ((KV_HEADS + h) * num_slots + slot)[:, None] * D + d[None, :], mask=kv_ok, other=0.0)
        run = tl.zeros([BLOCK_N], tl.int32)
        run_lo = 0
        run_hi = 0
        if ROTATE:  # a plain decode's queries come rotated: one run
            run = tl.load(key_run + keys0 + n, mask=n_ok, other=0)
            run_lo = tl.min(tl.where(n_ok, run, 1 << 30), 0)
            run_hi = tl.max(tl.where(n_ok, run, -1), 0)
        s = tl.full([TOKENS * GROUP_P, BLOCK_N], float("-inf"), tl.float32)
        for j in range(run_lo, run_hi + 1):
            qr = q
            if ROTATE:
                at = (base + j)[:, None] * D + d[None, :]
                qr = q * tl.load(cos + at, mask=q_ok, other=0.0) + qs * tl.load(
                    sin + at, mask=q_ok, other=0.0
                )
            if F32:
                sj = tl.dot(qr, tl.trans(k.to(tl.float32)), input_precision="ieee")
            else:
                sj = tl.dot(qr.to(k.dtype), tl.trans(k))
            s = tl.where((run == j)[None, :], sj, s)
        visible = row_ok[:, None] & (n[None, :] < count[:, None]) & n_ok[None, :]
        s = tl.where(visible, s * scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        if F32:  # noqa: SIM108  (a constexpr branch: Triton compiles one side)
            pv = tl.dot(p, v.to(tl.float32), input_precision="ieee")
        else:
            pv = tl.dot(p.to(v.dtype), v)
        acc = acc * alpha[:, None] + pv
        m_i = m_new
    at = tok.to(tl.int64) * HEADS + head
    if FINAL:
        result = acc / tl.maximum(l_i, 1e-30)[:, None]
        tl.store(out + at[:, None] * D + d[None, :], result.to(out.dtype.element_ty), mask=q_ok)
    else:
        part = sp * num_tokens * HEADS + at
        tl.store(part_m + part, m_i, mask=row_ok)
        tl.store(part_l + part, l_i, mask=row_ok)
        tl.store(part_acc + part[:, None] * D + d[None, :], acc, mask=q_ok)


def _combine(
    part_m,  # [splits, tokens * heads] fp32
    part_l,
    part_acc,  # [splits, tokens * heads, D]
    out,  # [tokens * heads, D]
    num_splits,
    stride,  # tokens * heads
    D: tl.constexpr,
    DP: tl.constexpr,
    SPLITS: tl.constexpr,
):
    at = tl.program_id(0)
    s = tl.arange(0, SPLITS)
    s_ok = s < num_splits
    d = tl.arange(0, DP)
    m = tl.load(part_m + s * stride + at, mask=s_ok, other=NEG)
    weight = tl.where(s_ok, tl.exp(m - tl.max(m, 0)), 0.0)
    total = tl.sum(weight * tl.load(part_l + s * stride + at, mask=s_ok, other=0.0), 0)
    mask = s_ok[:, None] & (d < D)[None, :]
    acc = tl.load(part_acc + (s * stride + at)[:, None] * D + d[None, :], mask=mask, other=0.0)
    result = tl.sum(weight[:, None] * acc, 0) / total
    tl.store(out + at * D + d, result.to(out.dtype.element_ty), mask=d < D)


@functools.cache
def kernels() -> tuple[Any, Any]:
    """(partial, combine): compiled for the GPU, or run by Triton's interpreter where the process
    started with ``TRITON_INTERPRET=1`` (read by Triton at import: its own library is jit too)."""
    return triton.jit(_partial), triton.jit(_combine)
