"""Attention over the paged KV cache, and RoPE.

A layer's cache is ``[2 * kv_heads, slots, head_dim]`` (K heads, then V heads; see
``cache.py``). Prefill attends causally within one sequence's new tokens; decode attends
one query token per row over the blocks of that row's view, gathered whole.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from paragen.engine.kernels.fused import FusedReads
    from paragen.engine.kernels.triton_attention import TritonReads

SMALL_BATCH = 16  # decode batches up to this size compute attention in fp32 on CPU


def in_fp32(num_tokens: int, device: torch.device) -> bool:
    """Whether a batch of this many query tokens computes its attention in fp32 (else the model's dtype)."""
    return num_tokens <= SMALL_BATCH and device.type == "cpu"


Attend = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (qkv [T, heads, D], layer cache) -> [T, q*D]


@dataclass(slots=True)
class AttnMeta:
    """Where this step's keys go and what each query attends to (built by the model runner).

    Prefill: one sequence, causal over its own new tokens. Decode: one token per row; each row
    reads its blocks in view order, padded to the longest row, and ``mask`` hides the slots past
    its length. ``gather`` indexes a layer's cache seen as rows of one block of one head
    (``[2 * kv_heads * num_blocks, block_size * head_dim]``): for each head, each row's blocks.
    Gathering whole blocks moves contiguous 2 KB runs, about twice as fast as slot by slot.
    """

    is_prefill: bool
    slots: torch.Tensor  # [T] flat cache slot per new token
    block_size: int = 0
    gather: torch.Tensor | None = None  # [2 * kv_heads * B * blocks per row] decode only
    mask: torch.Tensor | None = None  # [B, 1, L] additive, decode only; None when no slot is padding
    context: torch.Tensor | None = None  # prefill over a cached prefix: every slot of the sequence
    start: int = 0  # prefill: position of the first new token (tokens before it are cached)
    fused_reads: FusedReads | None = None  # decode through the fused kernel (then no gather or mask)
    triton_reads: TritonReads | None = None  # decode through the Triton kernel on CUDA


def rope_(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> None:
    """RoPE in place: rotate_half(x) * sin == swap_halves(x) * signed_sin, with swap_halves one flip."""
    swapped = x.view(*x.shape[:-1], 2, -1).flip(-2).view(x.shape)
    x.mul_(cos).addcmul_(swapped, signed_sin)


def prefill_attention(num_heads: int, scale: float, meta: AttnMeta | None = None) -> Attend:
    """Causal attention of the new tokens; with ``meta.context``, over the cached tokens too."""
    context = None if meta is None else meta.context
    allowed = None
    if meta is not None and context is not None:  # query i sits at start + i; key j is visible if j <= it
        queries = torch.arange(len(meta.slots), device=context.device) + meta.start
        allowed = torch.arange(len(context), device=context.device).unsqueeze(0) <= queries.unsqueeze(1)

    def attend(qkv: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        # [T, H, D] -> [1, H, T, D]; GQA through enable_gqa keeps K/V unexpanded. The batch axis
        # matters: on a CPU, 3-D inputs take SDPA's math path (the [H, T, T] scores materialised),
        # 4-D ones its flash kernel, much faster over a long prompt.
        heads = qkv.transpose(0, 1).unsqueeze(0)
        nkv = (heads.shape[1] - num_heads) // 2
        q, k, v = heads[:, :num_heads], heads[:, num_heads : num_heads + nkv], heads[:, num_heads + nkv :]
        if context is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True, scale=scale)
        else:  # this step's K/V are in the cache already: read the whole sequence from there
            cached = kv.index_select(1, context).unsqueeze(0)
            k, v = cached[:, :nkv], cached[:, nkv:]
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True, scale=scale)
        return out[0].transpose(0, 1).reshape(qkv.shape[0], -1)

    return attend


def decode_attention(
    meta: AttnMeta, *, num_heads: int, num_kv_heads: int, head_dim: int, scale: float, dtype: torch.dtype
) -> Attend:
    """One query token per row against its gathered context, as two batched matmuls.

    SDPA for a single query token is slow on CPU in bf16. Rows and KV heads share one batch
    axis (head-major, so the gathered cache needs no copy); each KV head's query heads are
    the rows of its matrix. Small batches run in fp32 on CPU, where oneDNN's tiny bf16 bmm
    costs about twice as much. Everything that is the same for every layer (shapes, buffers,
    the gather index, the mask) is set up here once per step.
    """
    assert meta.gather is not None and meta.block_size > 0
    gather, mask, b, d, nq, nkv = meta.gather, meta.mask, len(meta.slots), head_dim, num_heads, num_kv_heads
    group, device = nq // nkv, gather.device
    work = torch.float32 if in_fp32(b, device) else dtype
    q = torch.empty(nkv, b, group, d, dtype=work, device=device)
    q_src, q_rows = q.transpose(0, 1), q.view(nkv * b, group, d)  # one copy_ reorders and casts
    out = torch.empty(b, nkv, group, d, dtype=dtype, device=device)  # reused by every layer
    out_dst, out_flat = out.transpose(0, 1), out.view(b, nq * d)
    block_row = meta.block_size * d

    def attend(qkv: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        q_src.copy_(qkv[:, :nq].view(b, nkv, group, d))
        context = kv.view(-1, block_row).index_select(0, gather).to(work).view(2, nkv * b, -1, d)
        scores = torch.bmm(q_rows, context[0].transpose(1, 2))
        if scale != 1.0:
            scores.mul_(scale)
        if mask is not None:
            scores.view(nkv, b, group, -1).add_(mask)
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(work)
        out_dst.copy_(torch.bmm(probs, context[1]).view(nkv, b, group, d))
        return out_flat

    return attend
