"""A row's view sorted by how the torch attention reads its keys (``torch_attention.py`` says why).

- unshifted slots: the common region its class shares (``class_regions.py``), and the rest;
- short shifted segments (under SHORT_SEGMENT slots: the headers between steps): keys rotated after
  the gather;
- long shifted segments: keys as stored, scored by the query turned back by the segment's shift,
  the k-th shift's slots at the same place in every row of a group (one score matmul per shift).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from paragen.engine.hogwild.view import RowView

# A shifted segment shorter than this has its keys rotated (cheap: a few slots) rather than a query
# rotation of its own (a whole score matmul row over the shifted keys): the headers between steps.
SHORT_SEGMENT = 32


Key = tuple[int, int]  # a segment as the rows of one pass see it: its first slot and its length


@dataclass(slots=True)
class Layout:
    """A row's view sorted by how its keys are read (see the module's docstring)."""

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


def common_slots(row: RowView) -> list[int]:
    """The row's unshifted non-own slots (what its class shares at the head of every view)."""
    last = len(row.slots) - 1
    pairs = enumerate(zip(row.slots, row.shifts, strict=True))
    return [slot for i, (slots, shift) in pairs if shift == 0 and i != last for slot in slots]


def is_piece(slots: Sequence[int], shift: int, own: bool) -> bool:
    """A segment its class may gather once: long, and outside the common region."""
    return len(slots) >= max(1, SHORT_SEGMENT) and (shift != 0 or own)


def layout_of(row: RowView, common: list[int], pieces: set[Key]) -> Layout:
    """The row's slots by region; ``pieces``: the segments its class gathers once."""
    out = Layout(common)
    last = len(row.slots) - 1
    for i, (slots, shift) in enumerate(zip(row.slots, row.shifts, strict=True)):
        own = i == last
        if shift == 0 and not own:
            continue  # in common
        key = (slots[0], len(slots))
        if is_piece(slots, shift, own) and key in pieces:
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


def hide_future(visible: torch.Tensor, at: int, length: int) -> None:
    """The own segment at ``at`` in ``visible`` [T, ..]: each new token sees only what precedes it."""
    t = visible.shape[0]
    visible[:, at : at + length] &= torch.arange(length) <= (length - t + torch.arange(t)).unsqueeze(1)


def gather_index(
    heads: torch.Tensor, slots: torch.Tensor, tail_from: int, piece_starts: list[int], widths: list[int]
) -> torch.Tensor:
    """The cache rows to gather, region by region: the keys before ``tail_from``, then each piece's
    keys, then all the values; each region [kv_heads, B, width] so it is one contiguous matrix per
    kv head and row. (A bf16 matmul over a slice of a longer gathered row copies the slice first,
    which costs more than the matmul itself.)"""
    keys, values = heads[: len(heads) // 2], heads[len(heads) // 2 :]
    regions = [(0, tail_from)] + [(tail_from + a, w) for a, w in zip(piece_starts, widths, strict=True) if w]
    parts = [(keys + slots[:, a : a + w].reshape(1, -1)).view(-1) for a, w in regions]
    return torch.cat([*parts, (values + slots.view(1, -1)).view(-1)])


def moved_pieces(layouts: list[Layout]) -> tuple[list[list[int]], list[int], list[int]]:
    """Each row's long shifts (ascending), and where the k-th of every row's pieces sits in the moved
    region and how wide it is: at the same place in every row, so one score matmul per piece covers
    all the group's rows (a row without a k-th piece leaves it as padding)."""
    distinct = [sorted(lay.moved) for lay in layouts]
    widths = [
        max((len(lay.moved[d[k]]) for lay, d in zip(layouts, distinct, strict=True) if k < len(d)), default=0)
        for k in range(max(1, *(len(d) for d in distinct)))
    ]
    return distinct, [sum(widths[:k]) for k in range(len(widths))], widths
