"""What a Hogwild! forward's rows read, for the Triton kernel (``kernels/triton_attention.py``).

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

import torch

from paragen.engine.hogwild.view import RowView, Tables, turned_back
from paragen.engine.kernels.triton_attention import TritonReads

MAX_TOKENS = 8  # tokens of a class scored together (a larger class is cut into parts that share its keys)
Segment = tuple[int, int]  # a segment by its first slot and its length


@dataclass(slots=True)
class RunClass:
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


def key_classes(rows: list[RowView]) -> list[RunClass]:
    """The forward's classes (rows in this order, their tokens in that order)."""
    opened: list[_Open] = []
    shared: dict[tuple[Segment, ...], _Open] = {}
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
    return [part for one in opened for part in _closed(one)]


def _closed(one: _Open) -> list[RunClass]:
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
        RunClass(
            slots,
            runs,
            one.tokens[at : at + MAX_TOKENS],
            one.counts[at : at + MAX_TOKENS],
            one.positions[at : at + MAX_TOKENS],
            run_shifts[at : at + MAX_TOKENS],
        )
        for at in range(0, len(one.tokens), MAX_TOKENS)
    ]


def triton_reads(rows: list[RowView], tables: Tables, device: torch.device) -> TritonReads:
    """What the rows read (they come in this order, their tokens in that order), on ``device``."""
    arrays = host_reads(rows)
    sizes = [len(part) for part in arrays.ints]
    joined = array("i")
    for part in arrays.ints:
        joined += part
    ints = torch.frombuffer(joined, dtype=torch.int32).to(device)  # the host's arrays in one copy
    positions, shifts = torch.tensor(arrays.positions), torch.tensor(arrays.shifts)
    cos, sin = turned_back(tables, positions, shifts)
    rotations = (cos.to(device, torch.float32).contiguous(), sin.to(device, torch.float32).contiguous())
    key_slots, key_run, class_keys, tokens, starts, counts, rot = torch.split(ints, sizes)
    return TritonReads(
        key_slots, key_run, class_keys, tokens, starts, counts, rot, rotations,
        arrays.num_classes, arrays.max_class, arrays.max_count,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class HostReads:
    """What a Hogwild! forward's rows read, on the host: TritonReads' int32 fields in order, and each
    rotation's position and shift (its cos and sin rows: ``turned_back``)."""

    ints: list[array[int]]
    positions: array[int]
    shifts: array[int]
    num_classes: int
    max_class: int
    max_count: int


def host_reads(rows: list[RowView]) -> HostReads:
    """What ``triton_reads`` sends: each class's slots, runs and tokens, each token's count and rotations."""
    classes = key_classes(rows)
    positions, shifts = array("i"), array("i")
    num_tokens = sum(row.num_new for row in rows)
    token_rot, counts = array("i", [0]) * num_tokens, array("i", [0]) * num_tokens
    parts: list[array[int]] = [array("i") for _ in range(5)]  # slots, runs, class keys, tokens, starts
    slots, runs, keys, tokens, starts = parts
    starts.append(0)
    for one in classes:
        keys.append(len(slots))
        slots += one.slots
        runs += one.runs
        tokens.extend(one.tokens)
        starts.append(len(tokens))
        for token, count, position, row_shifts in zip(
            one.tokens, one.counts, one.positions, one.shifts, strict=True
        ):
            counts[token], token_rot[token] = count, len(positions)
            positions += array("i", [position]) * len(row_shifts)
            shifts += array("i", row_shifts)
    max_class = max(len(one.tokens) for one in classes)
    return HostReads([*parts, counts, token_rot], positions, shifts, len(classes), max_class, max(counts))
