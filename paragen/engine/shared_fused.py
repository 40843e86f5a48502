"""Hogwild!'s shared attention through the fused kernel (``fused.py``), the engine's on a CPU.

Each row reads its view's slots where they lie, in view order (its own segment last, so a row of T
new tokens has token k read all but the last T - 1 - k of them). A segment stored at base ``b``
and sitting at offset ``o`` in this view is scored by the row's query turned back by its shift
``o - b`` (see ``shared_attention.py`` for why that equals a plain forward over the flattened
view): one rotated query per distinct shift of the row, chosen key by key by the kernel. Nothing
is gathered, padded or cast; a session's shared keys are still read once per row that reads them.
"""

from __future__ import annotations

import torch

from paragen.engine import fused
from paragen.engine.attention import Attend, rope_
from paragen.engine.shared_plan import RowPlan, Tables, turned_back


def fused_shared_attention(
    plans: list[RowPlan],
    tables: Tables,
    *,
    num_heads: int,
    num_kv_heads: int,
    scale: float,
    dtype: torch.dtype,
) -> Attend:
    """The attention of a forward whose rows come in ``plans`` order (their tokens in that order)."""
    rows: list[fused.RowKeys] = []
    positions: list[int] = []  # per query: its token's view position
    shifts: list[int] = []  # per query: the shift it is turned back by
    tokens: list[int] = []  # per query: its token in the forward
    first_token = 0
    for row in plans:
        distinct = sorted(set(row.shifts))
        index = {shift: i for i, shift in enumerate(distinct)}
        slots: list[int] = []
        which: list[int] = []
        for segment, shift in zip(row.slots, row.shifts, strict=True):
            slots += segment
            which += [index[shift]] * len(segment)
        t = row.num_new
        counts = [len(slots) - (t - 1 - k) for k in range(t)]
        bases = [len(tokens) + k * len(distinct) for k in range(t)]
        for k in range(t):
            positions += [row.query_from + k] * len(distinct)
            shifts += distinct
            tokens += [first_token + k] * len(distinct)
        first_token += t
        rows.append(fused.RowKeys(slots, which, counts, bases))
    slot_plan = fused.plan(rows)
    cos, sin = turned_back(tables, torch.tensor(positions), torch.tensor(shifts))  # [Q, D]
    cos, sin = cos.unsqueeze(1).cpu(), sin.unsqueeze(1).cpu()
    queries_of = torch.tensor(tokens)

    def attend(qkv: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        queries = qkv[:, :num_heads].index_select(0, queries_of).float()  # [Q, heads, D], a copy
        rope_(queries, cos, sin)
        out = fused.attend(kv, queries, slot_plan, num_kv_heads=num_kv_heads, scale=scale)
        return out.to(dtype)

    return attend
