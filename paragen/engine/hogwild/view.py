"""A row of a Hogwild! forward as the attention reads it, and the rotations that read it.

A row's view is an ordered list of segments, each stored rotated at positions of its own (its
base); sitting at offset ``o`` in this view, a segment stored at base ``b`` is read at shift
``o - b``, by keys or queries turned by that shift (``torch_attention.py`` says why that equals a
plain forward over the flattened view). Built on the step thread before the forward, the same for
every attention path: ``groups.py`` (torch), ``fused_reads.py``, ``triton_reads.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

Tables = tuple[torch.Tensor, torch.Tensor]  # the model's RoPE cos and signed-sin tables [positions, D]


@dataclass(slots=True)
class RowView:
    """One row of a shared forward: its view's slots by segment, and where its new tokens sit."""

    slots: Sequence[Sequence[int]]  # per segment of the view, in view order: the cache slot of each token
    shifts: list[int]  # per segment: its offset in this view minus its base (the keys' extra rotation)
    num_new: int  # tokens this row appends to its last segment (the own one)
    query_from: int  # the view position of the first new token


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
    cos, sin = turned_back_each(
        tables[0][at].unsqueeze(1),
        tables[1][at].unsqueeze(1),
        shift_tables(tables, -shifts.to(device).unsqueeze(1)),
    )
    return cos.view(len(positions), -1), sin.view(len(positions), -1)


def turned_back_each(cos: torch.Tensor, sin: torch.Tensor, back: Tables) -> Tables:
    """[B, T, S, 1, D]: the queries' rotations ([B, T, D]) turned back by each of S shifts ([B, S, D]).

    Composed (cos(a - s) = cos a cos s + sin a sin s, and so on, in the signed-sin form) rather than
    looked up at ``a - s``, which for a negative shift can lie past the end of the tables.
    """
    c, s = back[0].unsqueeze(1), back[1].unsqueeze(1)  # [B, 1, S, D], a rotation by -shift
    a, b = cos.float().unsqueeze(2), sin.float().unsqueeze(2)  # [B, T, 1, D]
    return (a * c - b * s).unsqueeze(3), (b * c + a * s).unsqueeze(3)
