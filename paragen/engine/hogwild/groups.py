"""How a Hogwild! forward's rows read their views in the torch attention: rows with the same number
of new tokens form a group, whose gather index, masks and rotations are built on the step thread
before the forward (``layout.py``, ``class_regions.py``; the attention that uses them, and why the
regions are what they are: ``torch_attention.py``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from paragen.engine.hogwild.class_regions import (
    ClassRegions,
    class_regions,
    find_classes,
    shared_pieces,
    show_class,
)
from paragen.engine.hogwild.layout import common_slots, gather_index, hide_future, layout_of, moved_pieces
from paragen.engine.hogwild.view import RowView, Tables, shift_tables, turned_back_each


@dataclass(slots=True)
class RowGroup:
    """Rows with the same number of new tokens, attended as one batch."""

    start: int  # the group's first token in the forward's token order (rows are row-major)
    num_rows: int
    num_new: int
    gather: torch.Tensor  # [2 * kv_heads * B * L]: rows of a layer's cache ([.., head_dim]): gather_index
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
    regions: ClassRegions | None = None  # keys several rows read, gathered once for all of them (S slots)


def build_group(
    group_rows: list[RowView], start: int, *, num_slots: int, num_kv_rows: int, tables: Tables
) -> RowGroup:
    """The group of ``group_rows`` (each feeding as many tokens), its first token at ``start``."""
    b, t = len(group_rows), group_rows[0].num_new
    commons = [common_slots(row) for row in group_rows]
    classes = find_classes(commons)
    class_pieces = [] if classes is None else shared_pieces(group_rows, classes)
    class_of = {row: c for c, rows in enumerate(classes or []) for row in rows}
    keys = [{key for key, _ in class_pieces[class_of[i]]} if classes else set() for i in range(b)]
    layouts = [layout_of(*args) for args in zip(group_rows, commons, keys, strict=True)]
    if classes is None:
        for lay in layouts:
            lay.unshare()
    distinct, piece_starts, piece_widths = moved_pieces(layouts)
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
    regions = None
    if classes is not None:
        regions = class_regions(commons, classes, class_pieces, layouts, heads, (cos, sin), tables)
    class_width = 0 if regions is None else regions.total
    slots = torch.zeros(b, sum(widths.values()), dtype=torch.long)  # padding reads slot 0, masked
    turned_shifts = torch.zeros(b, widths["turned"], dtype=torch.long)
    visible = torch.zeros(b, t, class_width + slots.shape[1], dtype=torch.bool)
    for i, (row, lay) in enumerate(zip(group_rows, layouts, strict=True)):
        rest = visible[i, :, class_width:]
        if regions is not None:
            show_class(visible[i, :, :class_width], lay, regions, class_pieces[class_of[i]])
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
            hide_future(rest, a + starts[region], len(row.slots[-1]))
    key_cos, key_sin = shift_tables(tables, turned_shifts.to(device))
    tail_cos, tail_sin = turned_back_each(cos, sin, shift_tables(tables, -shifts.to(device)))
    return RowGroup(
        start=start,
        num_rows=b,
        num_new=t,
        gather=gather_index(heads, slots, starts["moved"], piece_starts, piece_widths).to(device),
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
        regions=regions,
    )
