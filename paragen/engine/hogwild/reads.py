"""What a Hogwild! pass's rows read: one plan, built on the step thread once a pass, for every attention.

A row's view is an ordered list of segments, each stored rotated at positions of its own (its
base); sitting at offset ``o`` in this view, a segment stored at base ``b`` is read at shift
``o - b``. RoPE is relative, so the row's query at view position ``p``, turned back by that shift
(rotated to ``p - (o - b)``), scores the segment's keys as a plain forward over the flattened view
scores them at ``o + j``: no key is rotated to be read, a query is rotated once per shift.

A session's one-token rows (its workers mid-step) read the same segments, each in its own order and
at its own shifts. Attention does not depend on the order of the keys, so they read one list of
slots, in the first row's order: a **key class**, whose keys an attention loads once for all of
them. A row of several tokens is a class of its own, token k reading all but the last
``num_new - 1 - k`` slots (its own segment's later tokens). A class's slots are cut into **runs**:
consecutive segments that every token of the class reads at one shift each (the prompt and the
history, unshifted for all, are one run). The plan says, per class, its slots and runs, and per
token its place in the forward, how many of the slots it reads, its view position and its shift of
each run. The attentions read it as they need: ``kernels/fused.py`` (the C kernel: a rotation
chosen key by key), ``kernels/triton_attention.py`` (one score matmul per run a tile touches, the
pass replayed from CUDA graphs by ``graphs.py``) and ``kernels/torch_attention.py`` (one score
matmul per run).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import torch

Tables = tuple[torch.Tensor, torch.Tensor]  # the model's RoPE cos and signed-sin tables [positions, D]
SegmentKey = tuple[int, int]  # a segment as the rows of one pass see it: its first slot and its length


@dataclass(slots=True)
class RowView:
    """One row of a shared forward: its view's slots by segment, and where its new tokens sit."""

    slots: Sequence[Sequence[int]]  # per segment of the view, in view order: the cache slot of each token
    shifts: list[int]  # per segment: its offset in this view minus its base (the keys' extra rotation)
    num_new: int  # tokens this row appends to its last segment (the own one)
    query_from: int  # the view position of the first new token


@dataclass(slots=True)
class KeyClass:
    """Tokens that read one list of cache slots (the first ``counts[i]`` of them), run by run."""

    slots: array[int]  # int32, in the first row's order of its segments
    run_starts: list[int]  # where each run begins in ``slots``, then len(slots)
    tokens: list[int]  # each token's place in the forward
    counts: list[int]  # per token: how many of the slots it reads (the first ones)
    positions: list[int]  # per token: its view position
    shifts: list[list[int]]  # per token: its shift of each run

    def run_length(self, run: int) -> int:
        return self.run_starts[run + 1] - self.run_starts[run]


@dataclass(frozen=True, slots=True)
class ReadsPlan:
    """What every token of a pass reads: its classes, and the pass's number of tokens."""

    classes: list[KeyClass]
    num_tokens: int


def plan_reads(rows: Sequence[RowView]) -> ReadsPlan:
    """The pass's key classes (the rows come in this order, their tokens in that order)."""
    opened: list[_Open] = []
    shared: dict[tuple[SegmentKey, ...], _Open] = {}
    token = 0
    for row in rows:
        pairs = [(seg, shift) for seg, shift in zip(row.slots, row.shifts, strict=True) if len(seg)]
        shift_of = {(seg[0], len(seg)): (seg, shift) for seg, shift in pairs}
        key = tuple(sorted(shift_of))
        # a one-token row whose segments are told apart by (first slot, length) may join a class
        may_share = row.num_new == 1 and len(key) == len(pairs)
        found = shared.get(key) if may_share else None
        if found is not None and all(shift_of[(s[0], len(s))][0] == s for s in found.segments):
            found.tokens.append(token)
            found.counts.append(found.counts[0])
            found.positions.append(row.query_from)
            found.shifts.append([shift_of[(s[0], len(s))][1] for s in found.segments])
        else:
            t, total = row.num_new, sum(len(seg) for seg, _ in pairs)
            new = _Open(
                segments=[seg for seg, _ in pairs],
                tokens=list(range(token, token + t)),
                counts=[total - (t - 1 - k) for k in range(t)],
                positions=[row.query_from + k for k in range(t)],
                shifts=[[shift for _, shift in pairs]] * t,
            )
            opened.append(new)
            if may_share:
                shared.setdefault(key, new)
        token += row.num_new
    return ReadsPlan([one.closed() for one in opened], token)


@dataclass(slots=True)
class _Open:
    """A class being formed: its segments in the first row's order, and each token's shift of each."""

    segments: list[Sequence[int]]
    tokens: list[int]
    counts: list[int]
    positions: list[int]
    shifts: list[list[int]]  # per token: its shift of each segment

    def closed(self) -> KeyClass:
        """The class with its slots cut into runs."""
        slots = array("i")
        firsts: list[int] = []  # each run's first segment
        run_starts: list[int] = []
        for i, segment in enumerate(self.segments):
            if i == 0 or any(shifts[i] != shifts[i - 1] for shifts in self.shifts):
                firsts.append(i)
                run_starts.append(len(slots))
            slots.extend(segment)
        run_shifts = [[shifts[i] for i in firsts] for shifts in self.shifts]
        return KeyClass(
            slots, [*run_starts, len(slots)], self.tokens, self.counts, self.positions, run_shifts
        )


def shift_tables(tables: Tables, shifts: torch.Tensor) -> Tables:
    """cos/signed-sin rotating already-rotated keys by ``shifts`` (signed; any table scaling divided out)."""
    cos, sin = tables
    size = shifts.abs()
    sign = torch.where(shifts < 0, -1.0, 1.0).unsqueeze(-1).to(sin.device, torch.float32)
    unit = cos[0, 0].float()  # cos(0): 1, or an attention scaling folded into the tables
    return cos[size].float() / unit, sin[size].float() * sign / unit


def turned_back(tables: Tables, positions: torch.Tensor, shifts: torch.Tensor) -> Tables:
    """[N, D] fp32: the rotation of a query at ``positions`` turned back by ``shifts`` (elementwise).

    Composed (cos(a - s) = cos a cos s + sin a sin s, and so on, in the signed-sin form) rather than
    looked up at ``a - s``, which for a negative shift can lie past the end of the tables.
    """
    device = tables[0].device
    at = positions.to(device)
    back_cos, back_sin = shift_tables(tables, -shifts.to(device))  # a rotation by -shift
    a, b = tables[0][at].float(), tables[1][at].float()
    return a * back_cos - b * back_sin, b * back_cos + a * back_sin
