"""How a Hogwild! forward's rows read their views: each row's slots by region, and the batch's
gather index, masks and rotations (built on the step thread before the forward; the attention that
uses them, and why the regions are what they are: ``shared_attention.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from paragen.engine.attention import in_fp32

Tables = tuple[torch.Tensor, torch.Tensor]  # the model's RoPE cos and signed-sin tables [positions, D]
# A shifted segment shorter than this has its keys rotated (cheap: a few slots) rather than a query
# rotation of its own (a whole score matmul row over the shifted keys): the headers between steps.
SHORT_SEGMENT = 32
# Classes whose common regions begin with this many slots alike or more read them as one head, gathered
# once for the whole group (sessions whose prompts begin alike hold the same blocks: PromptHeads), in
# groups that attend in fp32 only: there the gather's cast is saved (a 2-worker eval's passes, 16 rows:
# 2.5% faster), in bf16 only the gather, which the head's extra operators outweigh (4 workers, 32
# rows: 4-5% slower; docs/hogwild.md).
HEAD_MIN = 16


@dataclass(slots=True)
class RowPlan:
    """One row of a shared forward (built on the step thread before the forward)."""

    slots: Sequence[Sequence[int]]  # per segment of the view, in view order: the cache slot of each token
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
    mask: torch.Tensor  # [B, T, S + L] additive: padding, and the future in the own segment
    shared: Shared | None = None  # keys several rows read, gathered once for all of them (S slots)


@dataclass(slots=True)
class Shared:
    """What several rows of a group read alike, gathered once per class of rows (a session's workers).

    A class is the rows that read the same unshifted non-own slots (the session's prompt and
    history: the common region, P slots, scored by each row's query at its own position). Its
    pieces are the long segments two or more of its rows read wherever their views hold them (the
    workers' current steps): gathered once, scored by each row's query turned back by that row's
    shift of the piece. Softmax still runs per row over all of its view, so the result is the plain
    attention; only the gathers and matmuls are shared. Without pieces, a session of W workers
    gathered every current step W times a pass.
    """

    gather: torch.Tensor  # [2 * kv_heads * C * (P + pieces)]: each class's slots by region (_gather), padded
    head: int  # H: the slots every class's common region begins with, gathered once for the group
    head_gather: torch.Tensor  # [2 * kv_heads * H]
    width: int  # P: the rest of the common region
    pieces: tuple[tuple[int, int], ...]  # per piece k: where its slots start after P, how many
    cos: torch.Tensor  # [C * R, T, K, 1, D] each place's queries turned back by its shift of piece k
    sin: torch.Tensor
    num_classes: int  # C
    per_class: int  # R: the most rows a class has (fewer are padded with row 0's queries)
    sources: torch.Tensor  # [C * R]: the row whose queries fill each class place
    places: torch.Tensor  # [B]: each row's place (class * R + index in class)

    @property
    def total(self) -> int:
        """S: the head, the rest of the common region and every piece."""
        return self.head + self.width + sum(width for _, width in self.pieces)


def shift_tables(tables: Tables, shifts: torch.Tensor) -> Tables:
    """cos/signed-sin rotating already-rotated keys by ``shifts`` (signed; any table scaling divided out)."""
    cos, sin = tables
    size = shifts.abs()
    sign = torch.where(shifts < 0, -1.0, 1.0).unsqueeze(-1).to(sin.device, torch.float32)
    unit = cos[0, 0].float()  # cos(0): 1, or an attention scaling folded into the tables
    return cos[size].float() / unit, sin[size].float() * sign / unit


def turned_back(tables: Tables, positions: torch.Tensor, shifts: torch.Tensor) -> Tables:
    """[N, D] fp32: the rotation of a query at ``positions`` turned back by ``shifts`` (elementwise)."""
    device = tables[0].device
    at = positions.to(device)
    cos, sin = _minus(
        tables[0][at].unsqueeze(1),
        tables[1][at].unsqueeze(1),
        shift_tables(tables, -shifts.to(device).unsqueeze(1)),
    )
    return cos.view(len(positions), -1), sin.view(len(positions), -1)


Key = tuple[int, int]  # a segment as the rows of one pass see it: its first slot and its length


@dataclass(slots=True)
class _Layout:
    """A row's view sorted by how its keys are read (see the module docstring)."""

    common: list[int]  # unshifted non-own slots: its class's common region, when shared
    still: list[int] = field(default_factory=list)  # the other unshifted slots
    turned: list[int] = field(default_factory=list)  # short shifted segments: keys rotated after the gather
    turned_shifts: list[int] = field(default_factory=list)
    moved: dict[int, list[int]] = field(default_factory=dict)  # long shifted segments' slots by shift
    pieces: dict[Key, int] = field(default_factory=dict)  # segments its class gathers once: their shifts here
    own: tuple[str, int] = ("still", 0)  # the region holding the own segment, and where it starts there
    own_shift: int = 0  # where the own segment is moved: its shift (its piece)
    own_key: Key | None = None  # the own segment, when its class gathers it as a piece

    def unshare(self) -> None:
        """No class after all (no other row reads the same): the common slots join the still ones."""
        if self.own[0] == "still":
            self.own = ("still", self.own[1] + len(self.common))
        self.still, self.common = self.common + self.still, []


def _common(row: RowPlan) -> list[int]:
    """The row's unshifted non-own slots (what its class shares at the head of every view)."""
    last = len(row.slots) - 1
    pairs = enumerate(zip(row.slots, row.shifts, strict=True))
    return [slot for i, (slots, shift) in pairs if shift == 0 and i != last for slot in slots]


def _is_piece(slots: Sequence[int], shift: int, own: bool) -> bool:
    """A segment its class may gather once: long, and outside the common region."""
    return len(slots) >= max(1, SHORT_SEGMENT) and (shift != 0 or own)


def _layout(row: RowPlan, common: list[int], pieces: set[Key]) -> _Layout:
    """The row's slots by region; ``pieces``: the segments its class gathers once."""
    out = _Layout(common)
    last = len(row.slots) - 1
    for i, (slots, shift) in enumerate(zip(row.slots, row.shifts, strict=True)):
        own = i == last
        if shift == 0 and not own:
            continue  # in common
        key = (slots[0], len(slots))
        if _is_piece(slots, shift, own) and key in pieces:
            out.pieces[key] = shift
            out.own_key = key if own else out.own_key
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


def _classes(commons: list[list[int]]) -> list[list[int]] | None:
    """Rows grouped by the unshifted non-own slots they read; None when no two rows share them."""
    classes: dict[tuple[int, ...], list[int]] = {}
    for i, common in enumerate(commons):
        classes.setdefault(tuple(common), []).append(i)
    if max(len(rows) for rows in classes.values()) < 2 or not any(classes):
        return None
    return list(classes.values())


def _class_pieces(rows: list[RowPlan], classes: list[list[int]]) -> list[list[tuple[Key, list[int]]]]:
    """Per class: the segments two or more of its rows read outside the common region, longest first."""
    out = []
    for members in classes:
        slots_of: dict[Key, list[int]] = {}
        count: dict[Key, int] = {}
        for i in members:
            last = len(rows[i].slots) - 1
            for j, (slots, shift) in enumerate(zip(rows[i].slots, rows[i].shifts, strict=True)):
                if _is_piece(slots, shift, j == last):
                    key = (slots[0], len(slots))
                    slots_of[key] = list(slots)
                    count[key] = count.get(key, 0) + 1
        shared = [(key, slots) for key, slots in slots_of.items() if count[key] > 1]
        out.append(sorted(shared, key=lambda piece: -len(piece[1])))
    return out


def _shared(
    commons: list[list[int]],
    classes: list[list[int]],
    pieces: list[list[tuple[Key, list[int]]]],
    layouts: list[_Layout],
    heads: torch.Tensor,
    queries: Tables,
    tables: Tables,
) -> Shared:
    """The class regions of a group: slots, gather index, places and each place's piece rotations."""
    num_tokens = len(layouts) * queries[0].shape[1]
    head = _head([commons[rows[0]] for rows in classes]) if in_fp32(num_tokens, tables[0].device) else 0
    head_slots = torch.tensor(commons[classes[0][0]][:head], dtype=torch.long)
    commons = [common[head:] for common in commons]
    width, per_class = max(len(c) for c in commons), max(len(rows) for rows in classes)
    num_pieces = max(len(p) for p in pieces)
    widths = [max(len(p[k][1]) for p in pieces if k < len(p)) for k in range(num_pieces)]
    starts = [sum(widths[:k]) for k in range(len(widths))]
    slots = torch.zeros(len(classes), width + sum(widths), dtype=torch.long)
    sources = torch.zeros(len(classes), per_class, dtype=torch.long)
    shifts = torch.zeros(len(classes) * per_class, len(widths), dtype=torch.long)  # 0: row 0's padding
    places = [0] * sum(len(rows) for rows in classes)
    for c, (rows, class_pieces) in enumerate(zip(classes, pieces, strict=True)):
        slots[c, : len(commons[rows[0]])] = torch.tensor(commons[rows[0]], dtype=torch.long)
        for (_, piece_slots), at in zip(class_pieces, starts, strict=False):
            slots[c, width + at : width + at + len(piece_slots)] = torch.tensor(piece_slots, dtype=torch.long)
        sources[c, : len(rows)] = torch.tensor(rows, dtype=torch.long)
        for r, row in enumerate(rows):
            places[row] = c * per_class + r
            for k, (key, _) in enumerate(class_pieces):
                shifts[places[row], k] = layouts[row].pieces.get(key, 0)
    device = tables[0].device
    sources = sources.view(-1).to(device)
    cos, sin = _minus(queries[0][sources], queries[1][sources], shift_tables(tables, -shifts.to(device)))
    return Shared(
        gather=_gather(heads, slots, width, starts, widths).to(device),
        head=head,
        head_gather=(heads + head_slots.view(1, -1)).view(-1).to(device),
        width=width,
        pieces=tuple(zip(starts, widths, strict=True)),
        cos=cos,
        sin=sin,
        num_classes=len(classes),
        per_class=per_class,
        sources=sources,
        places=torch.tensor(places, device=device),
    )


def _head(commons: list[list[int]]) -> int:
    """How many slots every class's common region begins with alike (0 below HEAD_MIN or for one class)."""
    if len(commons) < 2:
        return 0
    low, high = min(commons), max(commons)  # what all share, the first and last in order share
    head = next((i for i, (a, b) in enumerate(zip(low, high, strict=False)) if a != b), len(low))
    return head if head >= HEAD_MIN else 0


def _hide_future(visible: torch.Tensor, at: int, length: int) -> None:
    """The own segment at ``at`` in ``visible`` [T, ..]: each new token sees only what precedes it."""
    t = visible.shape[0]
    visible[:, at : at + length] &= torch.arange(length) <= (length - t + torch.arange(t)).unsqueeze(1)


def _show_class(
    visible: torch.Tensor, lay: _Layout, shared: Shared, pieces: list[tuple[Key, list[int]]]
) -> None:
    """What a row reads of its class's regions ([T, S]): its common slots, the pieces in its view."""
    visible[:, : len(lay.common)] = True  # the head, then the rest of the common region
    for (key, slots), (start, _) in zip(pieces, shared.pieces, strict=False):  # a class may have fewer
        if key in lay.pieces:
            at = shared.head + shared.width + start
            visible[:, at : at + len(slots)] = True
            if key == lay.own_key:
                _hide_future(visible, at, len(slots))


def build_group(
    group_rows: list[RowPlan], start: int, *, num_slots: int, num_kv_rows: int, tables: Tables
) -> RowGroup:
    b, t = len(group_rows), group_rows[0].num_new
    commons = [_common(row) for row in group_rows]
    classes = _classes(commons)
    class_pieces = [] if classes is None else _class_pieces(group_rows, classes)
    class_of = {row: c for c, rows in enumerate(classes or []) for row in rows}
    keys = [{key for key, _ in class_pieces[class_of[i]]} if classes else set() for i in range(b)]
    layouts = [_layout(*args) for args in zip(group_rows, commons, keys, strict=True)]
    if classes is None:
        for lay in layouts:
            lay.unshare()
    distinct, piece_starts, piece_widths = _pieces(layouts)
    num_shifts = len(piece_widths)
    shifts = torch.tensor([d + [0] * (num_shifts - len(d)) for d in distinct])  # [B, S]; 0: no such piece
    widths = {
        "still": max(len(lay.still) for lay in layouts),
        "turned": max(len(lay.turned) for lay in layouts),
        "moved": sum(piece_widths),
    }
    starts = {"still": 0, "turned": widths["still"], "moved": widths["still"] + widths["turned"]}
    heads = torch.arange(num_kv_rows).unsqueeze(1) * num_slots
    device = tables[0].device
    queries = torch.tensor([[row.query_from + k for k in range(t)] for row in group_rows], device=device)
    cos, sin = tables[0][queries], tables[1][queries]  # [B, T, D]
    shared = None
    if classes is not None:
        shared = _shared(commons, classes, class_pieces, layouts, heads, (cos, sin), tables)
    class_width = 0 if shared is None else shared.total
    slots = torch.zeros(b, sum(widths.values()), dtype=torch.long)  # padding reads slot 0, masked
    turned_shifts = torch.zeros(b, widths["turned"], dtype=torch.long)
    visible = torch.zeros(b, t, class_width + slots.shape[1], dtype=torch.bool)
    for i, (row, lay) in enumerate(zip(group_rows, layouts, strict=True)):
        rest = visible[i, :, class_width:]
        if shared is not None:
            _show_class(visible[i, :, :class_width], lay, shared, class_pieces[class_of[i]])
        pieces = [
            (starts["moved"] + piece_starts[k], lay.moved[shift]) for k, shift in enumerate(distinct[i])
        ]
        for at, region_slots in [(0, lay.still), (starts["turned"], lay.turned), *pieces]:
            slots[i, at : at + len(region_slots)] = torch.tensor(region_slots, dtype=torch.long)
            rest[:, at : at + len(region_slots)] = True
        turned_shifts[i, : len(lay.turned)] = torch.tensor(lay.turned_shifts, dtype=torch.long)
        if lay.own_key is None:
            region, a = lay.own
            if region == "moved":
                a += piece_starts[distinct[i].index(lay.own_shift)]
            _hide_future(rest, a + starts[region], len(row.slots[-1]))
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
        shared=shared,
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
