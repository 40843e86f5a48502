"""How a Hogwild! forward's query tokens are grouped for the Triton kernel (``triton_attention.py``).

A session's one-token rows (its workers mid-step) read the same segments, each in its own order and
at its own shifts; attention does not depend on the order of the keys, so they read one list, in the
first row's order, as one class (each key loaded once for all of them, as ``paged_attention.c``
does on a CPU). The list is cut into runs: consecutive segments that every token of the class reads
at one shift each (the prompt and the history, unshifted for all, are one run; each other segment is
a run of its own unless its neighbour has the same shifts). Token t scores run j's keys by its query
turned back by its shift of run j: a tile of keys costs the kernel one score matmul per run it
touches. A row of several tokens is a class of its own, token k reading all but the last
``num_new - 1 - k`` slots (its own segment's later tokens).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from paragen.engine.hogwild.groups import RowPlan

MAX_TOKENS = 8  # tokens of a class scored together (a larger class is cut into parts that share its keys)
Segment = tuple[int, int]  # a segment by its first slot and its length


@dataclass(slots=True)
class Class:
    slots: array[int]  # int32
    runs: array[int]  # int32, per slot: its run
    tokens: list[int]  # each token's place in the forward
    counts: list[int]  # per token: how many of the slots it reads (the first ones)
    positions: list[int]  # per token: its view position
    shifts: list[list[int]]  # per token: its shift of each run


@dataclass(slots=True)
class _Open:
    """A class being formed: its segments in the first row's order, and each token's shift of each."""

    segments: list[Sequence[int]]
    tokens: list[int]
    counts: list[int]
    positions: list[int]
    shifts: list[list[int]]  # per token: its shift of each segment


def key_classes(plans: list[RowPlan]) -> list[Class]:
    """The forward's classes (rows in ``plans`` order, their tokens in that order)."""
    opened: list[_Open] = []
    shared: dict[tuple[Segment, ...], _Open] = {}
    token = 0
    for row in plans:
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
    return [part for one in opened for part in _closed(one)]


def _closed(one: _Open) -> list[Class]:
    """The class's slots cut into runs, and the class itself into parts of MAX_TOKENS tokens."""
    slots, runs = array("i"), array("i")
    starts: list[int] = []  # each run's first segment
    for i, segment in enumerate(one.segments):
        if i == 0 or any(shifts[i] != shifts[i - 1] for shifts in one.shifts):
            starts.append(i)
        slots.extend(segment)
        runs += array("i", [len(starts) - 1]) * len(segment)
    run_shifts = [[shifts[i] for i in starts] for shifts in one.shifts]
    return [
        Class(
            slots,
            runs,
            one.tokens[at : at + MAX_TOKENS],
            one.counts[at : at + MAX_TOKENS],
            one.positions[at : at + MAX_TOKENS],
            run_shifts[at : at + MAX_TOKENS],
        )
        for at in range(0, len(one.tokens), MAX_TOKENS)
    ]
