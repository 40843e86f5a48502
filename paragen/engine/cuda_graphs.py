"""Decode passes replayed from CUDA graphs: plain decode steps, and Hogwild! passes (``hogwild/graphs.py``).

A decode step of a large model launches its ~400 kernels from Python, and on a fast GPU the host,
not the GPU, bounds the step. Here a step's forward is captured once per shape and replayed: the
step's inputs (token ids, positions, cache slots, and what each token reads:
``kernels/triton_attention.py``) are written into the graph's own buffer, one host-to-device copy
of one int32 array, and the whole forward is one launch. Shapes are bucketed so that a growing
context keeps its graph: the keys are padded to a multiple of BUCKET_KEYS (padding is never read:
each token reads only its own count of keys), and the kernel's grid is sized for the bucket
(programs past a token's keys do nothing).

``PARAGEN_CUDA_GRAPHS=0`` runs every pass eagerly. Passes of more than MAX_TOKENS tokens (prefills,
sessions' first passes) always do.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from paragen.engine.attention import AttnMeta
from paragen.engine.kernels import triton_attention
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
        width = rounded_keys(max(len(table) for table in tables) * self.block_size) // self.block_size
        b = len(ids)
        ints = array("i", ids) + array("i", positions) + array("i", slots)
        for table in tables:
            ints += array("i", table) + array("i", [0]) * (width - len(table))
        ints += array("i", [p + 1 for p in positions])
        return self.replay(("decode", b, width), ints, self._decode_forward(b, width))

    def _decode_forward(self, b: int, width: int) -> Forward:
        model, kv, block_size = self.model, self.kv, self.block_size

        def forward(ints: torch.Tensor) -> torch.Tensor:
            ids, pos, slots, tables, lengths = torch.split(ints, [b, b, b, b * width, b])
            reads = triton_attention.decode_reads(
                tables.view(b, width), lengths, width * block_size, block_size
            )
            meta = AttnMeta(is_prefill=False, slots=slots.long(), triton_reads=reads)
            return model.logits(model.forward(ids.long(), pos.long(), meta, kv))

        return forward

    def replay(self, key: tuple[Any, ...], ints: array[int], forward: Forward) -> torch.Tensor:
        """The graph of ``key`` (captured from ``forward`` on first use) run over ``ints``: its logits."""
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


def rounded_keys(n: int) -> int:
    """Keys rounded up to a multiple of BUCKET_KEYS: a context keeps its graph for that many tokens, and
    the kernel's splits (sized from this count) stay within that of the context's own."""
    return -(-n // BUCKET_KEYS) * BUCKET_KEYS
