"""Attention over a view of segments whose keys are stored at segment-local positions (Hogwild!).

A row's view is an ordered list of segments; segment ``s`` sits at offset ``o_s`` (the summed
lengths of the segments before it). Keys of a segment are stored rotated at 0..len-1, so a query
at view position ``p`` is rotated per segment by ``p - o_s`` (RoPE is relative: q(p - o)·k(j) =
q(p)·k(o + j)) and one softmax runs across all segments.

The rows of a group gather their blocks with the k-th longest segment of every view at the same
slots (each position padded to its widest table in the group; keys may come in any order, only
their rotation matters), so each segment's rotation of the queries is scored against that
segment's keys only: S small score matmuls whose work adds up to one plain score matmul over the
view, not S of them. The key read, the mask, the softmax and the value matmul are those of the
plain decode path.
"""

from __future__ import annotations

import itertools
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
    ranges: list[tuple[int, int]]  # per segment position: its context slots [a, e), alike in every row
    cos: torch.Tensor  # [B, S, T, 1, D] query rotation per (row, segment, token)
    sin: torch.Tensor
    mask: torch.Tensor  # [B, T, L] additive: padding, tails of blocks, the future in the own segment


def query_positions(row: RowPlan) -> list[list[int]]:
    """Per segment, per new token: the query's position relative to that segment's start."""
    offsets = [sum(row.lengths[:i]) for i in range(len(row.lengths))]
    first = offsets[-1] + row.lengths[-1] - row.num_new
    return [[first + t - o for t in range(row.num_new)] for o in offsets]


def longest_first(row: RowPlan) -> tuple[RowPlan, list[list[int]], int]:
    """The row's segments reordered longest first, their query positions, and where the own one went.

    Attention does not depend on the order of the keys, only on each key's rotation, so a group
    may lay its rows' segments out in any order: longest first lines up segments of like size
    (the k-th longest of every row), which keeps the padding to each position's widest small.
    """
    order = sorted(range(len(row.lengths)), key=lambda s: -row.lengths[s])
    positions = query_positions(row)
    plan = RowPlan([row.tables[s] for s in order], [row.lengths[s] for s in order], row.num_new)
    return plan, [positions[s] for s in order], order.index(len(order) - 1)


def build_group(
    group_rows: list[RowPlan],
    start: int,
    block_size: int,
    num_blocks: int,
    num_kv_rows: int,
    model_tables: Tables,
) -> RowGroup:
    rows, positions, owns = zip(*(longest_first(row) for row in group_rows), strict=True)
    b, t = len(rows), rows[0].num_new
    num_segments = max(len(row.lengths) for row in rows)
    widths = [max(len(r.tables[s]) for r in rows if s < len(r.tables)) for s in range(num_segments)]
    bounds = [0, *itertools.accumulate(w * block_size for w in widths)]
    ranges = list(itertools.pairwise(bounds))
    sizes = torch.tensor([e - a for a, e in ranges])
    local = torch.arange(bounds[-1]) - torch.tensor(bounds[:-1]).repeat_interleave(sizes)  # in its segment
    visible = torch.empty(b, t, bounds[-1], dtype=torch.bool)
    rot = torch.zeros(b, num_segments, t, dtype=torch.long)
    per_row: list[list[int]] = []
    for i, row in enumerate(rows):
        per_row.append(_padded_blocks(row, widths))
        _mark_visible(visible[i], row, owns[i], ranges, sizes, local)
        rot[i, : len(row.lengths)] = torch.tensor(positions[i])
    tables = torch.tensor(per_row, dtype=torch.long)
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
        ranges=ranges,
        cos=cos[rot.to(device)].unsqueeze(3),
        sin=sin[rot.to(device)].unsqueeze(3),
        mask=mask.to(device),
    )


def _padded_blocks(row: RowPlan, widths: list[int]) -> list[int]:
    """The row's blocks, segment position by position, each padded (with block 0, masked) to its width."""
    blocks: list[int] = []
    for s, width in enumerate(widths):
        table = row.tables[s] if s < len(row.tables) else []
        blocks += table + [0] * (width - len(table))
    return blocks


def _mark_visible(
    visible: torch.Tensor,
    row: RowPlan,
    own: int,  # which segment is the row's own (the one its new tokens go to)
    ranges: list[tuple[int, int]],
    sizes: torch.Tensor,  # slots per segment position
    local: torch.Tensor,  # per slot: its position inside its segment position's range
) -> None:
    """[T, L]: each segment's slots up to its length; in the own segment, not the future."""
    t = row.num_new
    lengths = torch.tensor(row.lengths + [0] * (len(ranges) - len(row.lengths)))
    visible.copy_((local < lengths.repeat_interleave(sizes)).expand(t, -1))
    a, e = ranges[own]
    own_first = row.lengths[own] - t  # the new tokens sit at own_first + 0..t-1 of their own segment
    visible[:, a:e] &= local[a:e].unsqueeze(0) <= (own_first + torch.arange(t)).unsqueeze(1)


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
    prepared = list(zip(groups, works, rotations, masks, strict=True))

    def attend(qkv: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        out = torch.empty(num_tokens, nq * d, dtype=dtype, device=device)
        for g, work, (cos, sin), mask in prepared:
            b, t, s = g.num_rows, g.num_new, cos.shape[1]
            q = qkv[g.start : g.start + b * t, :nq].to(work).view(b, 1, t, nq, d)
            swapped = q.view(b, 1, t, nq, 2, d // 2).flip(-2).view(q.shape)
            rotated = (q * cos).addcmul_(swapped, sin)  # [B, S, T, heads, D]
            q_rows = rotated.view(b, s, t, nkv, group, d).permute(3, 0, 1, 2, 4, 5).reshape(nkv * b, s, -1, d)
            context = kv.view(-1, block_row).index_select(0, g.gather).to(work).view(2, nkv * b, -1, d)
            keys = context[0].transpose(1, 2)
            parts = [torch.bmm(q_rows[:, i], keys[:, :, a:e]) for i, (a, e) in enumerate(g.ranges)]
            scores = torch.cat(parts, dim=-1).view(nkv, b, t, group, -1)
            if scale != 1.0:
                scores.mul_(scale)
            scores.add_(mask)
            probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(work).view(nkv * b, t * group, -1)
            heads_out = torch.bmm(probs, context[1]).view(nkv, b, t, group, d).permute(1, 2, 0, 3, 4)
            out[g.start : g.start + b * t].view(b, t, nkv, group, d).copy_(heads_out)
        return out

    return attend
