"""Attention over a view of segments whose keys are stored rotated at their own positions (Hogwild!).

A row's view is an ordered list of segments; segment ``s`` sits at offset ``o_s`` (the summed
lengths of the segments before it). Its keys are stored rotated at ``b_s + j`` (``b_s``, its base:
the offset it had in the view that first wrote it, or where the history it was folded into ends).
RoPE is relative, so a query at view position ``p`` scores the key stored at ``b_s + j`` as a
plain forward over the flattened view would (key at ``o_s + j``) once the query is rotated to
``p - (o_s - b_s)`` instead of ``p``: the shift can move to the query side. A row's slots fall in
regions by how they are read:

- unshifted (the prompt, the history and the headers before it, in the layouts that keep them at
  the head of every view): scored by the query at its own position; those that several rows of a
  session read alike are their shared prefix (:class:`Prefix`), gathered once for all of them;
- short shifted segments (under ``SHORT_SEGMENT`` slots: the headers between steps): their few
  keys are rotated by their shifts after the gather and scored with the unshifted ones;
- long shifted segments (the workers' current steps): keys as stored, scored by the query rotated
  once per distinct shift. A row's k-th shift's slots sit at the same place in every row of the
  group (its "piece"), so each shift costs one score matmul over its own slots. Rotating those
  keys instead (four elementwise passes over every current step, every pass and layer) cost a
  4-worker pass more than its matmuls.

The gathered keys are laid out region by region, each one contiguous matrix per KV head and row
(see :func:`_gather`), then one softmax over the whole view and one value matmul.

The view is gathered slot by slot (not in whole blocks), densely: a 3-token header costs 3 slots.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from paragen.engine.attention import SMALL_BATCH, Attend

Tables = tuple[torch.Tensor, torch.Tensor]  # the model's RoPE cos and signed-sin tables [positions, D]
# A shifted segment shorter than this has its keys rotated (cheap: a few slots) rather than a query
# rotation of its own (a whole score matmul row over the shifted keys): the headers between steps.
SHORT_SEGMENT = 32


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
    gather: torch.Tensor  # [2 * kv_heads * B * L]: rows of a layer's cache ([.., head_dim]), see _gather
    turned_from: int  # slots from here to tail_from: short shifted segments, keys rotated by key_cos/sin
    tail_from: int  # slots from here on: long shifted segments, scored by the tail queries
    key_cos: torch.Tensor  # [B, tail_from - turned_from, D]
    key_sin: torch.Tensor
    cos: torch.Tensor  # [B, T, 1, D] the queries' rotation (at their view positions)
    sin: torch.Tensor
    tail_cos: torch.Tensor  # [B, T, S, 1, D] the queries at their view positions minus each of S shifts
    tail_sin: torch.Tensor
    pieces: tuple[tuple[int, int], ...]  # per shift index k: where its keys start after tail_from, how many
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


@dataclass(slots=True)
class _Layout:
    """A row's view sorted by how its keys are read (see the module docstring)."""

    common: list[int] = field(default_factory=list)  # unshifted non-own slots: the prefix, when shared
    still: list[int] = field(default_factory=list)  # the other unshifted slots
    turned: list[int] = field(default_factory=list)  # short shifted segments: keys rotated after the gather
    turned_shifts: list[int] = field(default_factory=list)
    moved: dict[int, list[int]] = field(default_factory=dict)  # long shifted segments' slots by shift
    own: tuple[str, int] = ("still", 0)  # the region holding the own segment, and where it starts there
    own_shift: int = 0  # where the own segment is moved: its shift (its piece)


def _layout(row: RowPlan, shared: bool) -> _Layout:
    """The row's slots by region; with ``shared``, the unshifted non-own ones apart as the prefix."""
    out = _Layout()
    for i, (slots, shift) in enumerate(zip(row.slots, row.shifts, strict=True)):
        own = i == len(row.slots) - 1
        if shift == 0 and shared and not own:
            out.common += slots
            continue
        if shift == 0:
            region, at = "still", len(out.still)
            out.still += slots
        elif len(slots) < SHORT_SEGMENT:
            region, at = "turned", len(out.turned)
            out.turned += slots
            out.turned_shifts += [shift] * len(slots)
        else:
            piece = out.moved.setdefault(shift, [])
            region, at = "moved", len(piece)
            piece += slots
        if own:
            out.own, out.own_shift = (region, at), shift
    return out


def _classes(group_rows: list[RowPlan]) -> list[list[int]] | None:
    """Rows grouped by the unshifted non-own slots they read; None when no two rows share them."""
    classes: dict[tuple[int, ...], list[int]] = {}
    for i, row in enumerate(group_rows):
        classes.setdefault(tuple(_layout(row, shared=True).common), []).append(i)
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
    prefix_width = max(len(lay.common) for lay in layouts)
    distinct, piece_starts, piece_widths = _pieces(layouts)
    num_shifts = len(piece_widths)
    shifts = torch.tensor([d + [0] * (num_shifts - len(d)) for d in distinct])  # [B, S]; 0: no such piece
    widths = {
        "still": max(len(lay.still) for lay in layouts),
        "turned": max(len(lay.turned) for lay in layouts),
        "moved": sum(piece_widths),
    }
    starts = {"still": 0, "turned": widths["still"], "moved": widths["still"] + widths["turned"]}
    slots = torch.zeros(b, sum(widths.values()), dtype=torch.long)  # padding reads slot 0, masked
    turned_shifts = torch.zeros(b, widths["turned"], dtype=torch.long)
    visible = torch.zeros(b, t, prefix_width + slots.shape[1], dtype=torch.bool)
    for i, (row, lay) in enumerate(zip(group_rows, layouts, strict=True)):
        rest = visible[i, :, prefix_width:]
        visible[i, :, : len(lay.common)] = True
        pieces = [
            (starts["moved"] + piece_starts[k], lay.moved[shift]) for k, shift in enumerate(distinct[i])
        ]
        for at, region_slots in [(0, lay.still), (starts["turned"], lay.turned), *pieces]:
            slots[i, at : at + len(region_slots)] = torch.tensor(region_slots, dtype=torch.long)
            rest[:, at : at + len(region_slots)] = True
        turned_shifts[i, : len(lay.turned)] = torch.tensor(lay.turned_shifts, dtype=torch.long)
        region, a = lay.own
        if region == "moved":
            a += piece_starts[distinct[i].index(lay.own_shift)]
        a += starts[region]
        n = len(row.slots[-1])  # the own segment, its new tokens last: hide each token's future
        rest[:, a : a + n] &= torch.arange(n) <= (n - t + torch.arange(t)).unsqueeze(1)
    heads = torch.arange(num_kv_rows).unsqueeze(1) * num_slots
    device = tables[0].device
    queries = torch.tensor([[row.query_from + k for k in range(t)] for row in group_rows], device=device)
    cos, sin = tables[0][queries], tables[1][queries]  # [B, T, D]
    key_cos, key_sin = shift_tables(tables, turned_shifts.to(device))
    tail_cos, tail_sin = _minus(cos, sin, shift_tables(tables, -shifts.to(device)))
    return RowGroup(
        start=start,
        num_rows=b,
        num_new=t,
        gather=_gather(heads, slots, starts["moved"], piece_starts, piece_widths).to(device),
        turned_from=starts["turned"],
        tail_from=starts["moved"],
        key_cos=key_cos,
        key_sin=key_sin,
        cos=cos.unsqueeze(2),
        sin=sin.unsqueeze(2),
        tail_cos=tail_cos,
        tail_sin=tail_sin,
        pieces=tuple(zip(piece_starts, piece_widths, strict=True)),
        mask=torch.zeros(visible.shape).masked_fill_(~visible, float("-inf")).to(device),
        prefix=None if classes is None else _prefix([lay.common for lay in layouts], classes, heads, device),
    )


def _gather(
    heads: torch.Tensor, slots: torch.Tensor, tail_from: int, piece_starts: list[int], widths: list[int]
) -> torch.Tensor:
    """The cache rows to gather, region by region: the keys before ``tail_from``, then each piece's
    keys, then all the values; each region [kv_heads, B, width] so it is one contiguous matrix per
    kv head and row. (A bf16 matmul over a slice of a longer gathered row copies it first: 8x the
    time of the matmul itself for a 600-key slice of 1400.)"""
    keys, values = heads[: len(heads) // 2], heads[len(heads) // 2 :]
    regions = [(0, tail_from)] + [(tail_from + a, w) for a, w in zip(piece_starts, widths, strict=True) if w]
    parts = [(keys + slots[:, a : a + w].reshape(1, -1)).view(-1) for a, w in regions]
    return torch.cat([*parts, (values + slots.view(1, -1)).view(-1)])


def _pieces(layouts: list[_Layout]) -> tuple[list[list[int]], list[int], list[int]]:
    """Each row's long shifts (ascending), and where the k-th of every row's pieces sits in the moved
    region and how wide it is: at the same place in every row, so one score matmul per piece covers
    all the group's rows (a row without a k-th piece leaves it as padding)."""
    distinct = [sorted(lay.moved) for lay in layouts]
    widths = [
        max((len(lay.moved[d[k]]) for lay, d in zip(layouts, distinct, strict=True) if k < len(d)), default=0)
        for k in range(max(1, *(len(d) for d in distinct)))
    ]
    return distinct, [sum(widths[:k]) for k in range(len(widths))], widths


def _minus(cos: torch.Tensor, sin: torch.Tensor, back: Tables) -> Tables:
    """[B, T, S, 1, D]: the queries' rotations ([B, T, D]) turned back by each of S shifts ([B, S, D]).

    Composed (cos(a - s) = cos a cos s + sin a sin s, and so on, in the signed-sin form) rather than
    looked up at ``a - s``, which for a negative shift can lie past the end of the tables.
    """
    c, s = back[0].unsqueeze(1), back[1].unsqueeze(1)  # [B, 1, S, D], a rotation by -shift
    a, b = cos.float().unsqueeze(2), sin.float().unsqueeze(2)  # [B, T, 1, D]
    return (a * c - b * s).unsqueeze(3), (b * c + a * s).unsqueeze(3)


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
        (g, w, g.cos.to(w), g.sin.to(w), g.key_cos.to(w), g.key_sin.to(w), _Tail(g, w, nkv, group), _mask5(g))
        for g, w in zip(groups, works, strict=True)
    ]

    def attend(qkv: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        out = torch.empty(num_tokens, nq * d, dtype=dtype, device=device)
        for g, work, cos, sin, key_cos, key_sin, tail, mask in prepared:
            b, t = g.num_rows, g.num_new
            raw = qkv[g.start : g.start + b * t, :nq].to(work).view(b, t, nq, d)
            q_heads = _rotate(raw, cos, sin).view(b, t, nkv, group, d).permute(2, 0, 1, 3, 4)
            q_rows = q_heads.reshape(nkv * b, t * group, d)  # [kv_heads * B, T * group, D]
            flat = kv.view(-1, d).index_select(0, g.gather).to(work)  # regions: see _gather
            keys = flat[: nkv * b * g.tail_from].view(nkv * b, g.tail_from, d)
            if key_cos.shape[1]:  # short shifted segments' keys, rotated to their places in the view
                turned = keys[:, g.turned_from :].view(nkv, b, -1, d)
                turned.copy_(_rotate(turned, key_cos, key_sin))
            scores = torch.bmm(q_rows, keys.transpose(1, 2))
            if tail.width:
                scores = torch.cat((scores, *tail.scores(raw, flat, g.tail_from)), dim=-1)
            values = flat[-nkv * b * (g.tail_from + tail.width) :].view(nkv * b, -1, d)
            scores = scores.view(nkv, b, t, group, -1)
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
            heads_out = torch.bmm(rest, values).view(nkv, b, t, group, d)
            if shared is not None:
                heads_out += shared.values(probs[..., : shared.prefix.width])
            out[g.start : g.start + b * t].view(b, t, nkv, group, d).copy_(heads_out.permute(1, 2, 0, 3, 4))
        return out

    return attend


class _Tail:
    """A group's scores of its long shifted segments: per shift index, its rotated queries and its piece."""

    def __init__(self, g: RowGroup, work: torch.dtype, nkv: int, group: int) -> None:
        b, t, num_shifts = g.tail_cos.shape[:3]
        self.width = sum(width for _, width in g.pieces)
        self.pieces = [(k, start, width) for k, (start, width) in enumerate(g.pieces) if width]
        self.cos, self.sin = g.tail_cos.to(work), g.tail_sin.to(work)
        self.shape = (b, t, num_shifts, nkv, group)

    def scores(self, raw: torch.Tensor, flat: torch.Tensor, tail_from: int) -> list[torch.Tensor]:
        """[kv_heads * B, T * group, width] per piece, from ``raw`` queries [B, T, heads, D] (not
        rotated yet) and the gathered rows (``flat``: each piece's keys as stored, see _gather)."""
        b, t, num_shifts, nkv, group = self.shape
        d = raw.shape[-1]
        rotated = _rotate(raw.unsqueeze(2), self.cos, self.sin)  # [B, T, S, heads, D]
        rows = rotated.view(b, t, num_shifts, nkv, group, d).permute(2, 3, 0, 1, 4, 5)
        rows = rows.reshape(num_shifts, nkv * b, t * group, d)
        out = []
        for k, start, width in self.pieces:
            at = nkv * b * (tail_from + start)
            keys = flat[at : at + nkv * b * width].view(nkv * b, width, d)
            out.append(torch.bmm(rows[k], keys.transpose(1, 2)))
        return out


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
