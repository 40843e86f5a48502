"""What a Hogwild! forward's rows read, for the fused kernel (``kernels/fused.py``): the engine's on a CPU.

Each row reads its view's slots where they lie (its own segment last, so a row of T new tokens has
token k read all but the last T - 1 - k of them). A segment stored at base ``b`` and sitting at
offset ``o`` in this view is scored by the row's query turned back by its shift ``o - b`` (see
``torch_attention.py`` for why that equals a plain forward over the flattened view): one rotated
query per distinct shift of the row, chosen key by key by the kernel. Nothing is gathered, padded
or cast.

A session's one-token rows (its workers mid-step) read the same segments, each in its own order
and at its own shifts. Attention does not depend on the order of the keys, so they read them as one
class: one list of slots in the first row's order, each row choosing its rotation per key
(``fused.KeyClass``), and the kernel loads each key once for all of them.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import torch

from paragen.engine.hogwild.view import RowView, Tables, turned_back
from paragen.engine.kernels import fused

Segment = tuple[int, int]  # a segment of a view by its first slot and its length


def fused_reads(rows: list[RowView], tables: Tables) -> tuple[fused.FusedReads, Tables]:
    """What the rows read (they come in this order, their tokens in that order), and the cos/sin rows
    of their rotations: ``fused.attention``'s arguments."""
    classes, positions, shifts = _classes(rows)
    reads = fused.class_reads(classes, sum(row.num_new for row in rows))
    cos, sin = turned_back(tables, torch.tensor(positions), torch.tensor(shifts))  # [N, D]
    return reads, (cos.cpu().contiguous(), sin.cpu().contiguous())


def _classes(rows: list[RowView]) -> tuple[list[fused.KeyClass], list[int], list[int]]:
    """The forward's key classes, and per rotation its token's view position and its shift."""
    classes: list[fused.KeyClass] = []
    shared: dict[tuple[Segment, ...], tuple[fused.KeyClass, dict[Segment, Sequence[int]]]] = {}
    positions: list[int] = []
    shifts: list[int] = []
    token = 0
    for row in rows:
        distinct = sorted(set(row.shifts))
        index = {shift: i for i, shift in enumerate(distinct)}
        base = len(positions)
        for k in range(row.num_new):
            positions += [row.query_from + k] * len(distinct)
            shifts += distinct
        segments = {
            (seg[0], len(seg)): (seg, shift) for seg, shift in zip(row.slots, row.shifts, strict=True) if seg
        }
        key = tuple(sorted(segments))
        # a row of one token whose segments are told apart by (first slot, length) may join a class
        may_share = row.num_new == 1 and len(key) == sum(1 for seg in row.slots if seg)
        found = shared.get(key) if may_share else None
        if found is not None and all(segments[s][0] == seg for s, seg in found[1].items()):
            key_class, canonical = found
            key_class.tokens.append(token)
            key_class.counts.append(len(key_class.slots))
            key_class.choices.append(
                _choices(canonical, {s: index[shift] for s, (_, shift) in segments.items()})
            )
            key_class.bases.append(base)
            key_class.num_queries.append(len(distinct))
        else:
            key_class = _own_class(row, index, token, base, len(distinct))
            classes.append(key_class)
            if may_share:
                shared.setdefault(key, (key_class, {(seg[0], len(seg)): seg for seg in row.slots if seg}))
        token += row.num_new
    return classes, positions, shifts


def _choices(canonical: dict[Segment, Sequence[int]], rotation: dict[Segment, int]) -> array[int]:
    """Per key of the class's list (its segments in ``canonical`` order): the row's rotation for it."""
    which = array("i")
    for segment in canonical:
        which += array("i", (rotation[segment],)) * segment[1]
    return which


def _own_class(
    row: RowView, index: dict[int, int], token: int, base: int, num_queries: int
) -> fused.KeyClass:
    """A class of the row's tokens: its view's slots in view order, token k reading all but the last
    ``num_new - 1 - k`` (the own segment's later new tokens)."""
    slots, which = array("i"), array("i")
    for segment, shift in zip(row.slots, row.shifts, strict=True):
        slots.extend(segment)
        which += array("i", (index[shift],)) * len(segment)
    t = row.num_new
    return fused.KeyClass(
        slots=slots,
        tokens=list(range(token, token + t)),
        counts=[len(slots) - (t - 1 - k) for k in range(t)],
        choices=[which] * t,
        bases=[base + k * num_queries for k in range(t)],
        num_queries=[num_queries] * t,
    )
