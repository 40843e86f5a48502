"""A fused attention over lists of cache slots, for the engine on a CPU (``paged_attention.c``).

The torch attentions gather every row's keys and values out of the paged cache, cast them, and
score them in batched matmuls padded to the longest row: a dozen operators and as many copies of
the context per layer. The kernel reads each key and value where it lies, with no padding, sums in
fp32: one call per layer. Each key is scored by a query of its own choosing (``key_query``), which
is how a Hogwild! view's segments, stored at their own positions, are read at shifts of their own
(one rotated query per shift: ``hogwild_reads``, from the pass's plan, ``hogwild/reads.py``). Tokens
that read one list of keys form a class (a Hogwild! session's workers), whose keys the kernel's
AVX512-BF16 path loads once for all of them.

What a forward's tokens read is the same for every layer (``FusedReads``): ``attention`` puts it
into the kernel's one argument (``fused_library.Layer``) once per forward, and each layer sets only
its cache, queries and output. Without a C compiler (``fused_library.py``), or with
``PARAGEN_FUSED_ATTENTION=0``, the engine keeps its torch attentions (also the only ones on CUDA).
"""

from __future__ import annotations

import ctypes
import itertools
import os
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from paragen.engine.hogwild.reads import ReadsPlan, Tables, turned_back
from paragen.engine.kernels.fused_library import Kernel, Layer, kernel

_DTYPES = (torch.float32, torch.bfloat16)  # of the cache and of the activations
# Tokens of one list attended together at most (a class's scratch and a thread's share of the work).
MAX_CLASS = 8
LayerAttention = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (qkv, this layer's cache) -> [T, q*D]


def enabled(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the engine's attention on this device and dtype goes through the kernel."""
    if device.type != "cpu" or dtype not in _DTYPES or os.environ.get("PARAGEN_FUSED_ATTENTION") == "0":
        return False
    return kernel() is not None


@dataclass(frozen=True, slots=True)
class FusedReads:
    """What each query token of a forward reads (int32, on the CPU), the same for every layer."""

    key_slots: torch.Tensor  # [K]: every class's keys, class after class
    key_query: torch.Tensor | None  # every token's choice of rotation per key, token after token (None: 0)
    key_start: torch.Tensor  # [T]: where token t's keys begin in key_slots
    key_count: torch.Tensor  # [T]: how many keys token t reads
    choice_start: torch.Tensor  # [T]: where token t's choices begin in key_query
    query_base: torch.Tensor  # [T]: token t's first rotation (a row of the rotation tables)
    query_count: torch.Tensor  # [T]: how many rotations of its query token t has
    class_tokens: torch.Tensor  # [T]: the tokens, class after class
    class_start: torch.Tensor  # [C + 1]: where each class's tokens begin in class_tokens
    max_count: int
    max_queries: int
    max_class: int


def hogwild_reads(plan: ReadsPlan, tables: Tables) -> tuple[FusedReads, Tables]:
    """What a Hogwild! pass's tokens read (``hogwild/reads.py``), and the cos/sin rows of their rotations:
    ``attention``'s arguments. A token has one rotation per distinct shift of its runs and chooses one
    per key (tokens with the same shifts share their choices); a class of more than MAX_CLASS tokens is
    attended in parts. The arrays are joined by ``array`` (in C: a 4-worker eval's pass holds ~32k
    choices, too many to gather through Python lists every pass)."""
    per_token = {name: [0] * plan.num_tokens for name in ("start", "count", "choice", "base", "queries")}
    order: list[int] = []
    class_start = [0]
    choices: list[array[int]] = []
    positions: list[int] = []
    shifts: list[int] = []
    at = num_choices = 0
    for one in plan.classes:
        choice_at: dict[tuple[int, ...], int] = {}  # a token's shift of each run -> where its choices begin
        for token, count, position, run_shifts in zip(
            one.tokens, one.counts, one.positions, one.shifts, strict=True
        ):
            distinct = sorted(set(run_shifts))
            if tuple(run_shifts) not in choice_at:
                choice_at[tuple(run_shifts)] = num_choices
                index = {shift: i for i, shift in enumerate(distinct)}
                which = array("i")
                for run, shift in enumerate(run_shifts):
                    which += array("i", (index[shift],)) * one.run_length(run)
                choices.append(which)
                num_choices += len(which)
            per_token["start"][token] = at
            per_token["count"][token] = count
            per_token["choice"][token] = choice_at[tuple(run_shifts)]
            per_token["base"][token] = len(positions)
            per_token["queries"][token] = len(distinct)
            positions += [position] * len(distinct)
            shifts += distinct
            order.append(token)
        for first in range(MAX_CLASS, len(one.tokens), MAX_CLASS):
            class_start.append(len(order) - len(one.tokens) + first)
        class_start.append(len(order))
        at += len(one.slots)
    reads = FusedReads(
        key_slots=_joined(c.slots for c in plan.classes),
        key_query=_joined(choices),
        key_start=_ints(per_token["start"]),
        key_count=_ints(per_token["count"]),
        choice_start=_ints(per_token["choice"]),
        query_base=_ints(per_token["base"]),
        query_count=_ints(per_token["queries"]),
        class_tokens=_ints(order),
        class_start=_ints(class_start),
        max_count=max(per_token["count"], default=0),
        max_queries=max(per_token["queries"], default=0),
        max_class=max((b - a for a, b in itertools.pairwise(class_start)), default=0),
    )
    cos, sin = turned_back(tables, torch.tensor(positions), torch.tensor(shifts))  # [N, D]
    return reads, (cos.cpu().contiguous(), sin.cpu().contiguous())


def _joined(parts: Iterable[array[int]]) -> torch.Tensor:
    joined = array("i")
    for part in parts:
        joined += part
    return torch.frombuffer(joined, dtype=torch.int32) if joined else torch.zeros(0, dtype=torch.int32)


def decode_reads(tables: torch.Tensor, lengths: torch.Tensor, block_size: int) -> FusedReads:
    """What a plain decode reads: row r reads its first ``lengths[r]`` slots through its block table
    (``tables`` [B, blocks], padded with any block), with its one query (rotated already)."""
    every = (tables.unsqueeze(2) * block_size + torch.arange(block_size)).view(len(tables), -1)
    slots = every[torch.arange(every.shape[1]) < lengths.unsqueeze(1)]  # row after row
    counts = lengths.to(torch.int32)
    rows = torch.arange(len(tables), dtype=torch.int32)
    return FusedReads(
        key_slots=slots.to(torch.int32),
        key_query=None,
        key_start=(torch.cumsum(counts, 0) - counts).to(torch.int32),
        key_count=counts,
        choice_start=torch.zeros(len(tables), dtype=torch.int32),
        query_base=torch.zeros(len(tables), dtype=torch.int32),
        query_count=torch.ones(len(tables), dtype=torch.int32),
        class_tokens=rows,
        class_start=torch.arange(len(tables) + 1, dtype=torch.int32),
        max_count=int(counts.max()),
        max_queries=1,
        max_class=1,
    )


def _ints(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


def attention(
    reads: FusedReads,
    *,
    num_heads: int,
    num_kv_heads: int,
    scale: float,
    rotations: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> LayerAttention:
    """Each layer's attention over ``reads`` (the kernel's argument filled once; a layer sets its tensors).

    A layer's call takes ``qkv`` [T, heads + 2 * kv_heads, D] (token t's raw query: its first
    ``heads`` rows) and ``kv`` [2 * kv_heads, slots, D], and returns [T, heads * D] in ``qkv``'s dtype.
    ``rotations``: cos and signed-sin rows [N, D] fp32 that turn the queries (token t's r-th: row
    ``query_base[t] + r``), or None when they come rotated.
    """
    run = kernel()
    assert run is not None
    return _Layers(run, reads, rotations, num_heads=num_heads, num_kv_heads=num_kv_heads, scale=scale)


class _Layers:
    """``attention``'s function. It holds ``reads`` and ``rotations``: the argument points into them."""

    def __init__(
        self,
        run: Kernel,
        reads: FusedReads,
        rotations: tuple[torch.Tensor, torch.Tensor] | None,
        *,
        num_heads: int,
        num_kv_heads: int,
        scale: float,
    ) -> None:
        self.run, self.reads, self.rotations, self.num_heads = run, reads, rotations, num_heads
        self.layer = Layer(
            num_kv_heads=num_kv_heads,
            group=num_heads // num_kv_heads,
            scale=scale,
            rot_cos=None if rotations is None else rotations[0].data_ptr(),
            rot_sin=None if rotations is None else rotations[1].data_ptr(),
            key_slots=reads.key_slots.data_ptr(),
            key_query=None if reads.key_query is None else reads.key_query.data_ptr(),
            key_start=reads.key_start.data_ptr(),
            key_count=reads.key_count.data_ptr(),
            choice_start=reads.choice_start.data_ptr(),
            query_base=reads.query_base.data_ptr(),
            query_count=reads.query_count.data_ptr(),
            class_tokens=reads.class_tokens.data_ptr(),
            class_start=reads.class_start.data_ptr(),
            num_classes=len(reads.class_start) - 1,
            max_count=reads.max_count,
            max_queries=reads.max_queries,
            max_class=reads.max_class,
            num_threads=torch.get_num_threads(),
        )
        self.argument = ctypes.byref(self.layer)

    def __call__(self, qkv: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        assert kv.is_contiguous() and qkv.is_contiguous()
        head_dim = qkv.shape[-1]
        out = torch.empty(len(self.reads.key_count), self.num_heads * head_dim, dtype=qkv.dtype)
        layer = self.layer
        layer.kv, layer.num_slots, layer.kv_bf16 = kv.data_ptr(), kv.shape[1], kv.dtype == torch.bfloat16
        layer.qkv, layer.qkv_row = qkv.data_ptr(), qkv.shape[1] * head_dim
        layer.qkv_bf16 = qkv.dtype == torch.bfloat16
        layer.out, layer.out_bf16 = out.data_ptr(), out.dtype == torch.bfloat16
        layer.head_dim = head_dim
        if self.run(self.argument) != 0:
            raise MemoryError("the fused attention could not allocate its scratch")
        return out
