"""A Hogwild! pass's attention in torch, where neither kernel runs (no compiler, CUDA without Triton).

It reads the pass's plan (``hogwild/reads.py``) as the kernels do: each key class's slots gathered
once for all of its tokens, and a key of run ``j`` scored by the token's query turned back by its
shift of run ``j``. Classes with the same number of tokens attend as one batch (a pass where several
workers start steps, or a session's headers, then costs one batch per length, not one per row): the
j-th run of every class sits at the same place in the batch's key axis, padded to the widest, so a
run costs one score matmul for the whole batch, and the runs are gathered region by region, each one
contiguous matrix per KV head and class (a bf16 matmul over a slice of a longer gathered row copies
the slice first, which costs more than the matmul itself). Then one softmax over every key a token
reads and one value matmul. Padding and the keys past a token's count (its own segment's later new
tokens) are masked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from paragen.engine.attention import in_fp32
from paragen.engine.hogwild.reads import KeyClass, ReadsPlan, Tables, turned_back

LayerAttention = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (qkv, this layer's cache) -> [T, q*D]


@dataclass(frozen=True, slots=True)
class _Batch:
    """Classes of one number of tokens T, attended together (C classes, K keys each after padding)."""

    tokens: torch.Tensor  # [C * T]: each (class, token)'s place in the forward
    gather: torch.Tensor  # rows of a layer's cache seen as [2 * kv_heads * slots, D]: keys run by run, values
    pieces: tuple[tuple[int, int], ...]  # per run index: where its keys start, how many (padded)
    cos: torch.Tensor  # [C, T, J, 1, D] fp32: each token's query turned back by its shift of run j
    sin: torch.Tensor
    mask: torch.Tensor  # [1, C, T, 1, K] additive: padding, and keys past each token's count
    work: torch.dtype  # the dtype its matmuls run in


def attention(
    plan: ReadsPlan,
    tables: Tables,
    *,
    num_slots: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    scale: float,
    dtype: torch.dtype,
) -> LayerAttention:
    """Every token of the pass against what it reads; the output rows follow the forward's token order."""
    by_size: dict[int, list[KeyClass]] = {}
    for one in plan.classes:
        by_size.setdefault(len(one.tokens), []).append(one)
    batches = [_batch(classes, tables, num_slots, num_kv_heads, dtype) for classes in by_size.values()]
    nq, nkv, d = num_heads, num_kv_heads, head_dim
    group = nq // nkv

    def attend(qkv: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        out = torch.empty(plan.num_tokens, nq * d, dtype=qkv.dtype, device=qkv.device)
        for b in batches:
            c, t, j = b.cos.shape[:3]
            raw = qkv.index_select(0, b.tokens)[:, :nq].to(b.work).view(c, t, 1, nq, d)
            rotated = _rotate(raw, b.cos.to(b.work), b.sin.to(b.work))  # [C, T, J, heads, D]
            queries = (
                rotated.view(c, t, j, nkv, group, d).permute(2, 3, 0, 1, 4, 5).reshape(j, nkv * c, -1, d)
            )
            flat = kv.view(-1, d).index_select(0, b.gather).to(b.work)
            width = sum(w for _, w in b.pieces)
            scores = []
            for k, (start, w) in enumerate(b.pieces):
                if w:  # piece k's keys: one [kv_heads * C, w, D] matrix
                    keys = flat[nkv * c * start : nkv * c * (start + w)].view(nkv * c, w, d)
                    scores.append(torch.bmm(queries[k], keys.transpose(1, 2)))
            joined = torch.cat(scores, dim=-1) if len(scores) > 1 else scores[0]
            if scale != 1.0:
                joined.mul_(scale)
            joined = joined.view(nkv, c, t, group, width).add_(b.mask)
            probs = torch.softmax(joined, dim=-1, dtype=torch.float32).to(b.work)
            values = flat[nkv * c * width :].view(nkv * c, width, d)
            heads = torch.bmm(probs.view(nkv * c, t * group, width), values).view(nkv, c, t, group, d)
            out.index_copy_(0, b.tokens, heads.permute(1, 2, 0, 3, 4).reshape(c * t, nq * d).to(out.dtype))
        return out

    return attend


def _batch(classes: list[KeyClass], tables: Tables, num_slots: int, nkv: int, dtype: torch.dtype) -> _Batch:
    """The batch of ``classes`` (each of as many tokens): its gather index, rotations and mask."""
    c, t = len(classes), len(classes[0].tokens)
    num_runs = max(len(one.run_starts) - 1 for one in classes)
    widths = [
        max((one.run_length(k) for one in classes if k < len(one.run_starts) - 1), default=0)
        for k in range(num_runs)
    ]
    starts = [sum(widths[:k]) for k in range(num_runs)]
    width = sum(widths)
    slots = torch.zeros(c, width, dtype=torch.long)  # padding reads slot 0, masked
    order = torch.full((c, width), width + max(len(one.slots) for one in classes), dtype=torch.long)
    positions, shifts = [], []
    for i, one in enumerate(classes):
        keys = torch.tensor(one.slots, dtype=torch.long)
        for k in range(len(one.run_starts) - 1):
            a, n = one.run_starts[k], one.run_length(k)
            slots[i, starts[k] : starts[k] + n] = keys[a : a + n]
            order[i, starts[k] : starts[k] + n] = torch.arange(
                a, a + n
            )  # the key's place in the class's list
        for position, run_shifts in zip(one.positions, one.shifts, strict=True):
            positions += [position] * num_runs
            shifts += run_shifts + [0] * (num_runs - len(run_shifts))  # 0: a run this class lacks (masked)
    counts = torch.tensor([one.counts for one in classes], dtype=torch.long)  # [C, T]
    visible = order.unsqueeze(1) < counts.unsqueeze(2)  # [C, T, K]
    device = tables[0].device
    cos, sin = turned_back(tables, torch.tensor(positions), torch.tensor(shifts))
    heads = torch.arange(2 * nkv).unsqueeze(1) * num_slots
    parts = [
        (heads[:nkv] + slots[:, a : a + w].reshape(1, -1)).view(-1)
        for a, w in zip(starts, widths, strict=True)
    ]
    return _Batch(
        tokens=torch.tensor([token for one in classes for token in one.tokens], device=device),
        gather=torch.cat([*parts, (heads[nkv:] + slots.view(1, -1)).view(-1)]).to(device),
        pieces=tuple(zip(starts, widths, strict=True)),
        cos=cos.view(c, t, num_runs, 1, -1),
        sin=sin.view(c, t, num_runs, 1, -1),
        mask=torch.zeros(visible.shape).masked_fill_(~visible, float("-inf")).view(1, c, t, 1, -1).to(device),
        work=torch.float32 if in_fp32(c * t, device) else dtype,
    )


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    swapped = x.view(*x.shape[:-1], 2, -1).flip(-2).view(x.shape)
    return (x * cos).addcmul_(swapped, sin)
