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
    mask: torch.Tensor  # [B, T, P + L] additive: padding, and the future in the own segment
    prefix: Prefix | None = None  # keys several rows share, gathered and scored once (P slots)


@dataclass(slots=True)
class Prefix:
    """Unshifted segments that several rows of a group read alike (a session's prompt and history).

    Their keys sit where every one of those views has them, so they are gathered once per class of
    rows and scored against all the class's queries in one matmul: a session's workers read its
    prompt and history once per pass, not once per worker. Softmax still runs per row over
    prefix and rest together, so the result is the plain attention over the whole view.
    """

    gather: torch.Tensor  # [2 * kv_heads * C * P]: each class's prefix slots, padded to P
    width: int  # P
    num_classes: int  # C
    per_class: int  # R: the most rows a class has (fewer are padded with row 0's queries)
    sources: torch.Tensor  # [C * R]: the row whose queries fill each class place
    places: torch.Tensor  # [B]: each row's place (class * R + index in class)


def shift_tables(tables: Tables, shifts: torch.Tensor) -> Tables:
    """cos/signed-sin rotating already-rotated keys by ``shifts`` (signed; any table scaling divided out)."""
    cos, sin = tables
    size = shifts.abs()
    sign = torch.where(shifts < 0, -1.0, 1.0).unsqueeze(-1).to(sin.device, torch.float32)
    unit = cos[0, 0].float()  # cos(0): 1, or an attention scaling folded into the tables
    return cos[size].float() / unit, sin[size].float() * sign / unit


def _layout(row: RowPlan, shared: bool) -> tuple[list[int], list[int], list[int], list[int], int]:
    """The row's slots: unshifted non-own ones (``shared``: kept apart as the prefix), the rest unshifted
    first, then shifted; the shifted ones' shifts; the own segment's start in the rest."""
    common: list[int] = []
    still: list[int] = []
    moved: list[int] = []
    shifts: list[int] = []
    for i, (slots, shift) in enumerate(zip(row.slots, row.shifts, strict=True)):
        own = i == len(row.slots) - 1
        if shift == 0 and shared and not own:
            common += slots
        elif shift == 0:
            at = len(still)
            still += slots
        else:
            at = -1 - len(moved)  # decoded below, once the unshifted width is known
            moved += slots
            shifts += [shift] * len(slots)
        if own:
            own_at = at
    return common, still, moved, shifts, own_at


def _classes(group_rows: list[RowPlan]) -> list[list[int]] | None:
    """Rows grouped by the unshifted non-own slots they read; None when no two rows share them."""
    classes: dict[tuple[int, ...], list[int]] = {}
    for i, row in enumerate(group_rows):
        layout = _layout(row, shared=True)
        classes.setdefault(tuple(layout[0]), []).append(i)
    if max(len(rows) for rows in classes.values()) < 2 or not any(classes):
        return None
    return list(classes.values())


def _prefix(
    commons: list[list[int]], classes: list[list[int]], heads: torch.Tensor, device: torch.device
) -> Prefix:
    width, per_class = max(len(c) for c in commons), max(len(rows) for rows in classes)
    slots = torch.zeros(len(classes), width, dtype=torch.long)
    sources = torch.zeros(len(classes), per_class, dtype=torch.long)
    places = [0] * sum(len(rows) for rows in classes)
    for c, rows in enumerate(classes):
        slots[c, : len(commons[rows[0]])] = torch.tensor(commons[rows[0]], dtype=torch.long)
        sources[c, : len(rows)] = torch.tensor(rows, dtype=torch.long)
        for k, row in enumerate(rows):
            places[row] = c * per_class + k
    return Prefix(
        gather=(heads + slots.view(1, -1)).view(-1).to(device),
        width=width,
        num_classes=len(classes),
        per_class=per_class,
        sources=sources.view(-1).to(device),
        places=torch.tensor(places, device=device),
    )


def build_group(
    group_rows: list[RowPlan], start: int, *, num_slots: int, num_kv_rows: int, tables: Tables
) -> RowGroup:
    b, t = len(group_rows), group_rows[0].num_new
    classes = _classes(group_rows)
    layouts = [_layout(row, shared=classes is not None) for row in group_rows]
    prefix_width = max(len(common) for common, *_ in layouts)
    width = max(len(still) for _, still, *_ in layouts)
    tail = max(len(moved) for _, _, moved, *_ in layouts)
    slots = torch.zeros(b, width + tail, dtype=torch.long)  # padding reads slot 0, masked
    shifts = torch.zeros(b, tail, dtype=torch.long)
    visible = torch.zeros(b, t, prefix_width + width + tail, dtype=torch.bool)
    for i, (row, (common, still, moved, row_shifts, own_at)) in enumerate(
        zip(group_rows, layouts, strict=True)
    ):
        slots[i, : len(still)] = torch.tensor(still, dtype=torch.long)
        slots[i, width : width + len(moved)] = torch.tensor(moved, dtype=torch.long)
        shifts[i, : len(moved)] = torch.tensor(row_shifts, dtype=torch.long)
        rest = visible[i, :, prefix_width:]
        visible[i, :, : len(common)] = True
        rest[:, : len(still)] = True
        rest[:, width : width + len(moved)] = True
        a = own_at if own_at >= 0 else width - 1 - own_at
        n = len(row.slots[-1])  # the own segment, its new tokens last: hide each token's future
        rest[:, a : a + n] &= torch.arange(n) <= (n - t + torch.arange(t)).unsqueeze(1)
    heads = torch.arange(num_kv_rows).unsqueeze(1) * num_slots
    device = tables[0].device
    key_cos, key_sin = shift_tables(tables, shifts.to(device))
    queries = torch.tensor([[row.query_from + k for k in range(t)] for row in group_rows], device=device)
    commons = [common for common, *_ in layouts]
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
        prefix=None if classes is None else _prefix(commons, classes, heads, device),
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
            q_heads = q.view(b, t, nkv, group, d).permute(2, 0, 1, 3, 4)  # [kv_heads, B, T, group, D]
            q_rows = q_heads.reshape(nkv * b, t * group, d)
            context = kv.view(-1, d).index_select(0, g.gather).to(work).view(2, nkv, b, -1, d)
            if key_cos.shape[1]:  # the shifted segments' keys, rotated to their places in the view
                tail = context[0, :, :, g.tail_from :]
                tail.copy_(_rotate(tail, key_cos, key_sin))
            keys = context[0].view(nkv * b, -1, d)
            scores = torch.bmm(q_rows, keys.transpose(1, 2)).view(nkv, b, t, group, -1)
            shared = None
            if g.prefix is not None:
                shared = _Shared(g.prefix, kv, q_heads, work, nkv, d)
                scores = torch.cat((shared.scores(), scores), dim=-1)
            if scale != 1.0:
                scores.mul_(scale)
            scores.add_(mask)
            probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(work)
            rest = probs if shared is None else probs[..., shared.prefix.width :]
            rest = rest.reshape(nkv * b, t * group, -1)
            heads_out = torch.bmm(rest, context[1].view(nkv * b, -1, d)).view(nkv, b, t, group, d)
            if shared is not None:
                heads_out += shared.values(probs[..., : shared.prefix.width])
            out[g.start : g.start + b * t].view(b, t, nkv, group, d).copy_(heads_out.permute(1, 2, 0, 3, 4))
        return out

    return attend


class _Shared:
    """One layer's prefix attention of a group: each class's keys gathered once, its rows' queries stacked."""

    def __init__(
        self, prefix: Prefix, kv: torch.Tensor, q_heads: torch.Tensor, work: torch.dtype, nkv: int, d: int
    ) -> None:
        self.prefix = prefix
        c, r, p = prefix.num_classes, prefix.per_class, prefix.width
        self.shape = q_heads.shape  # [kv_heads, B, T, group, D]
        self.context = kv.view(-1, d).index_select(0, prefix.gather).to(work).view(2, nkv * c, p, d)
        self.queries = q_heads.reshape(nkv, -1, d * self.shape[2] * self.shape[3])
        self.queries = self.queries.index_select(1, prefix.sources).view(nkv * c, -1, d)  # [.., R*T*group, D]
        self.rows_per_class = r

    def scores(self) -> torch.Tensor:
        """[kv_heads, B, T, group, P]: every row's scores against its class's prefix."""
        nkv, b, t, group, _ = self.shape
        scores = torch.bmm(self.queries, self.context[0].transpose(1, 2))  # [kv*C, R*T*group, P]
        per_place = scores.view(nkv, -1, t * group * self.prefix.width)
        return per_place.index_select(1, self.prefix.places).view(nkv, b, t, group, -1)

    def values(self, probs: torch.Tensor) -> torch.Tensor:
        """The prefix's share of every row's output, from its probabilities [kv_heads, B, T, group, P]."""
        nkv, b, t, group, d = self.shape
        c, p = self.prefix.num_classes, self.prefix.width
        placed = probs.new_zeros(nkv, c * self.rows_per_class, t * group * p)
        placed.index_copy_(1, self.prefix.places, probs.reshape(nkv, b, -1))
        out = torch.bmm(placed.view(nkv * c, -1, p), self.context[1])  # [kv*C, R*T*group, D]
        per_place = out.view(nkv, -1, t * group * d)
        return per_place.index_select(1, self.prefix.places).view(nkv, b, t, group, d)
