"""Attention over a view of segments whose keys are stored rotated at their own positions (Hogwild!).

A row's view is an ordered list of segments; segment ``s`` sits at offset ``o_s`` (the summed
lengths of the segments before it). Its keys are stored rotated at ``b_s + j`` (``b_s``, its base:
the offset it had in the view that first wrote it, or where the history it was folded into ends).
RoPE is relative, so the key at ``b_s + j`` rotated once more by ``o_s - b_s`` is the key a plain
forward over the flattened view would hold. Where the shift is 0 (the prompt, the history and the
headers before it, in the layouts that keep them at the head of every view) nothing moves; the
rest (the workers' current steps and the headers between them: tens of tokens) is rotated after
the gather. Each row's query is rotated once, at its view position, and attends the whole view
in one score matmul, one softmax and one value matmul: the plain decode path plus a small
rotation, however many segments the view holds.

The view is gathered slot by slot (not in whole blocks), densely: a 3-token header costs 3 slots.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from paragen.engine.attention import SMALL_BATCH, Attend

Tables = tuple[torch.Tensor, torch.Tensor]  # the model's RoPE cos and signed-sin tables [positions, D]


@dataclass(slots=True)
class RowPlan:
    """One row of a shared forward, as plain lists (built on the step thread before the forward)."""

    slots: list[list[int]]  # per segment of the view, in view order: the cache slot of each token
    shifts: list[int]  # per segment: its offset in this view minus its base (the keys' extra rotation)
    num_new: int  # tokens this row appends to its last segment (the own one)
    query_from: int  # the view position of the first new token


@dataclass(slots=True)
class RowGroup:
    """Rows with the same number of new tokens, attended as one batch."""

    start: int  # the group's first token in the forward's token order (rows are row-major)
    num_rows: int
    num_new: int
    gather: torch.Tensor  # [2 * kv_heads * B * L]: rows of a layer's cache seen as [.., head_dim]
    tail_from: int  # slots from here on are keys to rotate (shifts != 0), by key_cos/key_sin
    key_cos: torch.Tensor  # [B, L - tail_from, D]
    key_sin: torch.Tensor
    cos: torch.Tensor  # [B, T, 1, D] the queries' rotation (at their view positions)
    sin: torch.Tensor
    mask: torch.Tensor  # [B, T, L] additive: padding, and the future in the own segment


def shift_tables(tables: Tables, shifts: torch.Tensor) -> Tables:
    """cos/signed-sin rotating already-rotated keys by ``shifts`` (signed; any table scaling divided out)."""
    cos, sin = tables
    size = shifts.abs()
    sign = torch.where(shifts < 0, -1.0, 1.0).unsqueeze(-1).to(sin.device, torch.float32)
    unit = cos[0, 0].float()  # cos(0): 1, or an attention scaling folded into the tables
    return cos[size].float() / unit, sin[size].float() * sign / unit


def _layout(row: RowPlan) -> tuple[list[int], list[int], list[int], int]:
    """The row's slots unshifted first, then shifted; the shifted ones' shifts; the own segment's start."""
    still: list[int] = []
    moved: list[int] = []
    shifts: list[int] = []
    for i, (slots, shift) in enumerate(zip(row.slots, row.shifts, strict=True)):
        own = i == len(row.slots) - 1
        if shift == 0:
            at = len(still)
            still += slots
        else:
            at = -1 - len(moved)  # decoded below, once the unshifted width is known
            moved += slots
            shifts += [shift] * len(slots)
        if own:
            own_at = at
    return still, moved, shifts, own_at


def build_group(
    group_rows: list[RowPlan], start: int, *, num_slots: int, num_kv_rows: int, tables: Tables
) -> RowGroup:
    b, t = len(group_rows), group_rows[0].num_new
    layouts = [_layout(row) for row in group_rows]
    width = max(len(still) for still, *_ in layouts)
    tail = max(len(moved) for _, moved, *_ in layouts)
    slots = torch.zeros(b, width + tail, dtype=torch.long)  # padding reads slot 0, masked
    shifts = torch.zeros(b, tail, dtype=torch.long)
    visible = torch.zeros(b, t, width + tail, dtype=torch.bool)
    for i, (row, (still, moved, row_shifts, own_at)) in enumerate(zip(group_rows, layouts, strict=True)):
        slots[i, : len(still)] = torch.tensor(still, dtype=torch.long)
        slots[i, width : width + len(moved)] = torch.tensor(moved, dtype=torch.long)
        shifts[i, : len(moved)] = torch.tensor(row_shifts, dtype=torch.long)
        visible[i, :, : len(still)] = True
        visible[i, :, width : width + len(moved)] = True
        a = own_at if own_at >= 0 else width - 1 - own_at
        n = len(row.slots[-1])  # the own segment, its new tokens last: hide each token's future
        visible[i, :, a : a + n] &= torch.arange(n) <= (n - t + torch.arange(t)).unsqueeze(1)
    heads = torch.arange(num_kv_rows).unsqueeze(1) * num_slots
    device = tables[0].device
    key_cos, key_sin = shift_tables(tables, shifts.to(device))
    queries = torch.tensor([[row.query_from + k for k in range(t)] for row in group_rows], device=device)
    return RowGroup(
        start=start,
        num_rows=b,
        num_new=t,
        gather=(heads + slots.view(1, -1)).view(-1).to(device),
        tail_from=width,
        key_cos=key_cos,
        key_sin=key_sin,
        cos=tables[0][queries].unsqueeze(2),
        sin=tables[1][queries].unsqueeze(2),
        mask=torch.zeros(visible.shape).masked_fill_(~visible, float("-inf")).to(device),
    )


def _mask5(g: RowGroup) -> torch.Tensor:
    return g.mask.view(1, g.num_rows, g.num_new, 1, -1)  # [1, B, T, 1, L] against [kv_heads, B, T, group, L]


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    swapped = x.view(*x.shape[:-1], 2, -1).flip(-2).view(x.shape)
    return (x * cos).addcmul_(swapped, sin)


def shared_attention(
    groups: list[RowGroup],
    *,
    num_tokens: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    scale: float,
    dtype: torch.dtype,
) -> Attend:
    """Every group's queries against their views; the output rows follow the forward's token order."""
    nq, nkv, d = num_heads, num_kv_heads, head_dim
    group = nq // nkv
    device = groups[0].gather.device
    works = [
        torch.float32 if g.num_rows * g.num_new <= SMALL_BATCH and device.type == "cpu" else dtype
        for g in groups
    ]
    prepared = [
        (g, w, g.cos.to(w), g.sin.to(w), g.key_cos.to(w), g.key_sin.to(w), _mask5(g))
        for g, w in zip(groups, works, strict=True)
    ]

    def attend(qkv: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        out = torch.empty(num_tokens, nq * d, dtype=dtype, device=device)
        for g, work, cos, sin, key_cos, key_sin, mask in prepared:
            b, t = g.num_rows, g.num_new
            q = _rotate(qkv[g.start : g.start + b * t, :nq].to(work).view(b, t, nq, d), cos, sin)
            q_rows = q.view(b, t, nkv, group, d).permute(2, 0, 1, 3, 4).reshape(nkv * b, t * group, d)
            context = kv.view(-1, d).index_select(0, g.gather).to(work).view(2, nkv, b, -1, d)
            if key_cos.shape[1]:  # the shifted segments' keys, rotated to their places in the view
                tail = context[0, :, :, g.tail_from :]
                tail.copy_(_rotate(tail, key_cos, key_sin))
            keys = context[0].view(nkv * b, -1, d)
            scores = torch.bmm(q_rows, keys.transpose(1, 2)).view(nkv, b, t, group, -1)
            if scale != 1.0:
                scores.mul_(scale)
            scores.add_(mask)
            probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(work).view(nkv * b, t * group, -1)
            heads_out = torch.bmm(probs, context[1].view(nkv * b, -1, d)).view(nkv, b, t, group, d)
            out[g.start : g.start + b * t].view(b, t, nkv, group, d).copy_(heads_out.permute(1, 2, 0, 3, 4))
        return out

    return attend
