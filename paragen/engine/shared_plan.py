"""How a Hogwild! forward's rows read their views: each row's slots by region, and the batch's
gather index, masks and rotations (built on the step thread before the forward; the attention that
uses them, and why the regions are what they are: ``shared_attention.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

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

    def unshare(self) -> None:
        """No prefix after all (no other row reads the same): the common slots join the still ones."""
        if self.own[0] == "still":
            self.own = ("still", self.own[1] + len(self.common))
        self.still, self.common = self.common + self.still, []


def _layout(row: RowPlan) -> _Layout:
    """The row's slots by region, the unshifted non-own ones apart (the prefix, if others share it)."""
    out = _Layout()
    for i, (slots, shift) in enumerate(zip(row.slots, row.shifts, strict=True)):
        own = i == len(row.slots) - 1
        if shift == 0 and not own:
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


def _classes(layouts: list[_Layout]) -> list[list[int]] | None:
    """Rows grouped by the unshifted non-own slots they read; None when no two rows share them."""
    classes: dict[tuple[int, ...], list[int]] = {}
    for i, lay in enumerate(layouts):
        classes.setdefault(tuple(lay.common), []).append(i)
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
    layouts = [_layout(row) for row in group_rows]
    classes = _classes(layouts)
    if classes is None:
        for lay in layouts:
            lay.unshare()
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
