"""Attention over a view of segments whose keys are stored at segment-local positions (Hogwild!).

A row's view is an ordered list of segments; segment ``s`` sits at offset ``o_s`` (the summed
lengths of the segments before it). Keys of a segment are stored rotated at 0..len-1, so a query
at view position ``p`` is rotated per segment by ``p - o_s`` (RoPE is relative: q(p - o)·k(j) =
q(p)·k(o + j)) and one softmax runs across all segments. The query is rotated once per segment
of the view (S rotations), all against one gathered context, and each key slot then takes the
score of its own segment's rotation: the key read, the softmax and the value matmul are those of
the plain decode path, only the score matmul has S times as many query rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from paragen.engine.attention import SMALL_BATCH, Attend

Tables = tuple[torch.Tensor, torch.Tensor]  # the model's RoPE cos and signed-sin tables [positions, D]


@dataclass(slots=True)
class RowPlan:
    """One row of a shared forward, as plain lists (built on the step thread before the forward)."""

    tables: list[list[int]]  # per segment of the view, in view order: its blocks covering its length
    lengths: list[int]  # per segment: its length once this forward's writes are in
    num_new: int  # tokens this row appends to its last segment


@dataclass(slots=True)
class RowGroup:
    """Rows with the same number of new tokens, attended as one batch."""

    start: int  # the group's first token in the forward's token order (rows are row-major)
    num_rows: int
    num_new: int
    gather: torch.Tensor  # [2 * kv_heads * B * blocks per row]: block rows of a layer's cache
    seg_index: torch.Tensor  # [B, L]: which segment of its view each context slot belongs to
    cos: torch.Tensor  # [B, S, T, 1, D] query rotation per (row, segment, token)
    sin: torch.Tensor
    mask: torch.Tensor  # [B, T, L] additive: padding, tails of blocks, the future in the own segment


def query_positions(row: RowPlan) -> list[list[int]]:
    """Per segment, per new token: the query's position relative to that segment's start."""
    offsets = [sum(row.lengths[:i]) for i in range(len(row.lengths))]
    first = offsets[-1] + row.lengths[-1] - row.num_new
    return [[first + t - o for t in range(row.num_new)] for o in offsets]


def build_group(
    rows: list[RowPlan], start: int, block_size: int, num_blocks: int, num_kv_rows: int, model_tables: Tables
) -> RowGroup:
    b, t = len(rows), rows[0].num_new
    per_row = [[blk for table in row.tables for blk in table] for row in rows]
    width = max(len(blocks) for blocks in per_row)
    seg_max = max(len(row.lengths) for row in rows)
    ctx = width * block_size
    seg_index = torch.zeros(b, ctx, dtype=torch.long)
    visible = torch.zeros(b, t, ctx, dtype=torch.bool)
    rot = torch.zeros(b, seg_max, t, dtype=torch.long)
    for i, row in enumerate(rows):
        seg, local = _slot_layout(row, block_size)
        n = len(seg)
        seg_index[i, :n] = seg
        lengths = torch.tensor(row.lengths)
        vis = (local < lengths[seg]).expand(t, n).clone()
        own_first = row.lengths[-1] - t  # the new tokens' local positions: own_first + 0..t-1
        causal = local.unsqueeze(0) <= (own_first + torch.arange(t)).unsqueeze(1)
        is_own = seg == len(row.lengths) - 1
        vis &= ~is_own | causal
        visible[i, :, :n] = vis
        rot[i, : len(row.lengths)] = torch.tensor(query_positions(row))
    tables = torch.tensor([blocks + [0] * (width - len(blocks)) for blocks in per_row], dtype=torch.long)
    heads = torch.arange(num_kv_rows).unsqueeze(1) * num_blocks
    gather = (heads + tables.view(1, -1)).view(-1)
    mask = torch.zeros(visible.shape).masked_fill_(~visible, float("-inf"))
    cos, sin = model_tables
    device = cos.device
    return RowGroup(
        start=start,
        num_rows=b,
        num_new=t,
        gather=gather.to(device),
        seg_index=seg_index.to(device),
        cos=cos[rot.to(device)].unsqueeze(3),
        sin=sin[rot.to(device)].unsqueeze(3),
        mask=mask.to(device),
    )


def _slot_layout(row: RowPlan, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For each slot of the row's gathered blocks: its segment (view index) and local position."""
    segs: list[int] = []
    locals_: list[int] = []
    for s, table in enumerate(row.tables):
        n = len(table) * block_size
        segs += [s] * n
        locals_ += range(n)
    return torch.tensor(segs, dtype=torch.long), torch.tensor(locals_, dtype=torch.long)


def shared_attention(
    groups: list[RowGroup],
    *,
    num_tokens: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    scale: float,
    dtype: torch.dtype,
) -> Attend:
    """Every group's queries against their views; the output rows follow the forward's token order."""
    nq, nkv, d = num_heads, num_kv_heads, head_dim
    group, block_row = nq // nkv, block_size * head_dim
    device = groups[0].gather.device
    works = [
        torch.float32 if g.num_rows * g.num_new <= SMALL_BATCH and device.type == "cpu" else dtype
        for g in groups
    ]
    rotations = [(g.cos.to(w), g.sin.to(w)) for g, w in zip(groups, works, strict=True)]
    masks = [g.mask.view(1, g.num_rows, g.num_new, 1, -1) for g in groups]
    seg_indices = [
        g.seg_index.view(1, g.num_rows, 1, 1, -1).expand(nkv, -1, 1, g.num_new * group, -1) for g in groups
    ]

    prepared = list(zip(groups, works, rotations, masks, seg_indices, strict=True))

    def attend(qkv: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        out = torch.empty(num_tokens, nq * d, dtype=dtype, device=device)
        for g, work, (cos, sin), mask, seg_index in prepared:
            b, t, s = g.num_rows, g.num_new, cos.shape[1]
            q = qkv[g.start : g.start + b * t, :nq].to(work).view(b, 1, t, nq, d)
            swapped = q.view(b, 1, t, nq, 2, d // 2).flip(-2).view(q.shape)
            rotated = (q * cos).addcmul_(swapped, sin)  # [B, S, T, heads, D]
            q_rows = rotated.view(b, s, t, nkv, group, d).permute(3, 0, 1, 2, 4, 5).reshape(nkv * b, -1, d)
            context = kv.view(-1, block_row).index_select(0, g.gather).to(work).view(2, nkv * b, -1, d)
            scores = torch.bmm(q_rows, context[0].transpose(1, 2)).view(nkv, b, s, t * group, -1)
            picked = scores.gather(2, seg_index).view(nkv, b, t, group, -1)
            if scale != 1.0:
                picked.mul_(scale)
            picked.add_(mask)
            probs = torch.softmax(picked, dim=-1, dtype=torch.float32).to(work).view(nkv * b, t * group, -1)
            heads_out = torch.bmm(probs, context[1]).view(nkv, b, t, group, d).permute(1, 2, 0, 3, 4)
            out[g.start : g.start + b * t].view(b, t, nkv, group, d).copy_(heads_out)
        return out

    return attend
