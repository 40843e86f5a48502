"""Decode passes replayed from CUDA graphs: plain decode steps and Hogwild! passes of a few tokens a row.

A decode step of a 7B model on an H200 reads 15 GB of weights (3.5 ms) but launched its ~400
kernels from Python in 8-16 ms: the host, not the GPU, bounded the step. Here a step's forward is
captured once per shape and replayed: the step's inputs (token ids, positions, cache slots, and the
attention plan: ``triton_attention.py``, for Hogwild! with each query rotation's position and
shift) are written into the graph's own buffer, one host-to-device copy of one int32 array, and the
whole forward, the rotations' cos and sin rows included, is one launch. Shapes are bucketed so
that a growing context keeps its graph: the plan's keys are padded to a multiple of BUCKET_KEYS,
its rotations to a power of two (padding is never read: each token reads only its own count of
keys), and the kernel's grid is sized for the bucket (programs past a token's keys do nothing).

``PARAGEN_CUDA_GRAPHS=0`` runs every pass eagerly. Passes of more than MAX_TOKENS tokens (prefills,
sessions' first passes) always do.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from paragen.engine.attention import AttnMeta
from paragen.engine.hogwild.groups import RowPlan, Tables, turned_back
from paragen.engine.kernels import triton_attention
from paragen.engine.kernels.triton_plan import Plan
from paragen.engine.model import Model

MAX_TOKENS = 64
BUCKET_KEYS = 512
Forward = Callable[[torch.Tensor], torch.Tensor]  # the static int32 inputs -> logits


def enabled(device: torch.device, dtype: torch.dtype) -> bool:
    graphs_on = os.environ.get("PARAGEN_CUDA_GRAPHS", "1") != "0"
    return device.type == "cuda" and graphs_on and triton_attention.enabled(device, dtype)


@dataclass(slots=True)
class _Captured:
    graph: Any  # torch.cuda.CUDAGraph
    ints: torch.Tensor  # the static int32 inputs, in one buffer
    logits: torch.Tensor


class Graphs:
    """The captured forwards of one model over one cache, by shape (their memory in one pool)."""

    def __init__(self, model: Model, kv: torch.Tensor, block_size: int):
        self.model, self.kv, self.block_size = model, kv, block_size
        self.captured: dict[tuple[Any, ...], _Captured] = {}
        self.pool: Any = None

    def decode(
        self, ids: list[int], positions: list[int], slots: list[int], tables: list[list[int]]
    ) -> torch.Tensor:
        """[rows, vocab] fp32: a plain decode step's logits (each row at its position, through its blocks)."""
        width = _rounded(max(len(table) for table in tables) * self.block_size) // self.block_size
        b = len(ids)
        ints = array("i", ids) + array("i", positions) + array("i", slots)
        for table in tables:
            ints += array("i", table) + array("i", [0]) * (width - len(table))
        ints += array("i", [p + 1 for p in positions])
        return self._replay(("decode", b, width), ints, self._decode_forward(b, width))

    def _decode_forward(self, b: int, width: int) -> Forward:
        model, kv, block_size = self.model, self.kv, self.block_size

        def forward(ints: torch.Tensor) -> torch.Tensor:
            ids, pos, slots, tables, lengths = torch.split(ints, [b, b, b, b * width, b])
            plan = triton_attention.decode_plan(
                tables.view(b, width), lengths, width * block_size, block_size
            )
            meta = AttnMeta(is_prefill=False, slots=slots.long(), triton_plan=plan)
            return model.logits(model.forward(ids.long(), pos.long(), meta, kv))

        return forward

    def shared(
        self,
        plans: list[RowPlan],
        ids: list[int],
        pos: list[int],
        slots: list[int],
        last: list[int],
        tables: Tables,
    ) -> torch.Tensor:
        """[rows, vocab] fp32: a Hogwild! pass's logits at each row's last token (``shared_pass.py``)."""
        plan = padded_plan(plans)
        ints = array("i", ids) + array("i", pos) + array("i", slots) + array("i", last) + plan.ints
        t = len(ids)
        key = ("shared", t, len(last), *plan.sizes, plan.max_count, plan.max_class)
        forward = self._shared_forward([t, t, t, len(last)], plan, tables)
        return self._replay(key, ints, forward)

    def _shared_forward(self, sizes: list[int], padded: Padded, tables: Tables) -> Forward:
        model, kv = self.model, self.kv

        def forward(ints: torch.Tensor) -> torch.Tensor:
            ids, pos, slots, last, fields = torch.split(ints, [*sizes, len(ints) - sum(sizes)])
            plan = padded.on_device(fields, tables)
            attend = triton_attention.attention(
                plan,
                num_heads=model.num_heads,
                num_kv_heads=model.cfg.num_kv_heads,
                head_dim=model.head_dim,
                scale=model.attn_scale,
            )
            meta = AttnMeta(is_prefill=False, slots=slots.long())
            hidden = model.forward(ids.long(), pos.long(), meta, kv, attend)
            return model.logits(hidden[last.long()])

        return forward

    def _replay(self, key: tuple[Any, ...], ints: array[int], forward: Forward) -> torch.Tensor:
        host = torch.frombuffer(ints, dtype=torch.int32)
        captured = self.captured.get(key)
        if captured is None:
            captured = self._capture(host, key, forward)
        captured.ints.copy_(host)
        captured.graph.replay()
        return captured.logits

    def _capture(self, host: torch.Tensor, key: tuple[Any, ...], forward: Forward) -> _Captured:
        """The forward run once (kernels compiled; it writes what the replay will write), then captured."""
        device = self.kv.device
        ints = host.to(device)
        stream = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            forward(ints)
        torch.cuda.current_stream(device).wait_stream(stream)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            logits = forward(ints)
        self.captured[key] = _Captured(graph, ints, logits)
        return self.captured[key]


@dataclass(frozen=True, slots=True)
class Padded:
    """A Hogwild! plan's arrays padded to their buckets: ``triton_plan.Plan``'s int fields in
    order, then each rotation's position and shift (its cos and sin rows are made in the graph)."""

    ints: array[int]
    sizes: tuple[int, ...]
    num_classes: int
    max_class: int
    max_count: int

    def on_device(self, ints: torch.Tensor, tables: Tables) -> Plan:
        """The plan over ``ints`` (this one's arrays, where the graph reads them)."""
        key_slots, key_run, class_keys, tokens, starts, counts, rot, positions, shifts = torch.split(
            ints, list(self.sizes)
        )
        cos, sin = turned_back(tables, positions.long(), shifts.long())
        return Plan(
            key_slots, key_run, class_keys, tokens, starts, counts, rot, (cos.float(), sin.float()),
            self.num_classes, self.max_class, self.max_count,
        )  # fmt: skip


def padded_plan(plans: list[RowPlan]) -> Padded:
    """The pass's plan with its keys and rotations padded to their buckets (the graph's shape).

    The classes are not padded: the kernel's grid has a program per class, KV head and split, and
    splits are sized from the classes there are (padding them to the tokens cut a 4-worker session's
    programs to a quarter, each reading 4x the keys: a 32B pass at 8k tokens took 36 ms, not 24).
    """
    arrays = triton_attention.shared_arrays(plans)
    key_slots, key_run, class_keys, tokens, starts, counts, token_rot = arrays.ints
    num_keys, num_rotations = _rounded(len(key_slots)), _bucket(len(arrays.positions))
    parts = [
        _padded(key_slots, num_keys),
        _padded(key_run, num_keys),
        class_keys,
        tokens,
        starts,
        counts,
        token_rot,
        _padded(arrays.positions, num_rotations),  # padding: rotations by 0, never read
        _padded(arrays.shifts, num_rotations),
    ]
    ints = array("i")
    for part in parts:
        ints += part
    sizes = tuple(len(part) for part in parts)
    max_class = triton_attention.pow2(arrays.max_class)  # the kernel's TOKENS: at most MAX_TOKENS
    return Padded(ints, sizes, arrays.num_classes, max_class, _rounded(arrays.max_count))


def _bucket(n: int) -> int:
    """The next power of two, at least 16."""
    return max(16, 1 << max(0, n - 1).bit_length())


def _rounded(n: int) -> int:
    """Keys rounded up to a multiple of BUCKET_KEYS: a context keeps its graph for that many tokens, and
    the kernel's splits (sized from this count) stay within that of the context's own."""
    return -(-n // BUCKET_KEYS) * BUCKET_KEYS


def _padded(part: Sequence[int], size: int, fill: int = 0) -> array[int]:
    out = array("i", part)
    return out + array("i", [fill]) * (size - len(out))
