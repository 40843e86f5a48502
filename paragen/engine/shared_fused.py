"""Hogwild!'s shared attention through the fused kernel (``fused.py``), the engine's on a CPU.

Each row reads its view's slots where they lie, in view order (its own segment last, so a row of T
new tokens has token k read all but the last T - 1 - k of them). A segment stored at base ``b``
and sitting at offset ``o`` in this view is scored by the row's query turned back by its shift
``o - b`` (see ``shared_attention.py`` for why that equals a plain forward over the flattened
view): one rotated query per distinct shift of the row, chosen key by key by the kernel. Nothing
is gathered, padded or cast; a session's shared keys are still read once per row that reads them.
"""

from __future__ import annotations

from array import array

import torch

from paragen.engine import fused
from paragen.engine.attention import Attend
from paragen.engine.shared_plan import RowPlan, Tables, turned_back


def fused_shared_attention(
    plans: list[RowPlan],
    tables: Tables,
    *,
    num_heads: int,
    num_kv_heads: int,
    scale: float,
) -> Attend:
    """The attention of a forward whose rows come in ``plans`` order (their tokens in that order)."""
    rows: list[fused.RowKeys] = []
    positions: list[int] = []  # per rotation: its token's view position
    shifts: list[int] = []  # per rotation: the shift it turns the query back by
    for row in plans:
        distinct = sorted(set(row.shifts))
        index = {shift: i for i, shift in enumerate(distinct)}
        slots, which = array("i"), array("i")
        for segment, shift in zip(row.slots, row.shifts, strict=True):
            slots.extend(segment)
            which += array("i", (index[shift],)) * len(segment)
        t = row.num_new
        counts = [len(slots) - (t - 1 - k) for k in range(t)]
        bases = [len(positions) + k * len(distinct) for k in range(t)]
        for k in range(t):
            positions += [row.query_from + k] * len(distinct)
            shifts += distinct
        rows.append(fused.RowKeys(slots, which, counts, bases, len(distinct)))
    slot_plan = fused.plan(rows)
    cos, sin = turned_back(tables, torch.tensor(positions), torch.tensor(shifts))  # [N, D]
    rotations = (cos.cpu().contiguous(), sin.cpu().contiguous())

    def attend(qkv: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return fused.attend(
            kv,
            qkv,
            slot_plan,
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            scale=scale,
            rotations=rotations,
        )

    return attend
