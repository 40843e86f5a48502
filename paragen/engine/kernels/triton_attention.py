"""The engine's attention on CUDA: one Triton kernel a layer over lists of cache slots (triton_kernels.py).

``TritonReads`` says what each query token reads, the same for every layer: its class's list of
slots (a Hogwild! session's one-token rows read one list, each key loaded once for all of them; a
row of several tokens, or a plain decode row, is a class of its own), how many of them, and, for
Hogwild!, its rotations: one per run of the class's slots (consecutive segments that every token of
the class reads at one shift each), so a key in run ``j`` is scored by the token's query at its view
position turned back by its shift of run ``j`` (RoPE is relative: the score a plain forward over the
view gives; ``hogwild/reads.py``). A Hogwild! pass's are read off its plan on the host, as int32
arrays sent in one copy (``hogwild_reads``); a plain decode's are built on the device from its block
tables (``decode_reads``).

Where Triton is missing the engine keeps its torch attentions. ``PARAGEN_TRITON_ATTENTION=0`` turns
the kernel off; ``=interpret``, in a process started with ``TRITON_INTERPRET=1``, runs it in
Triton's interpreter on a CPU (the tests: slow, exact).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from array import array
from collections.abc import Callable
from dataclasses import dataclass

import torch

from paragen.engine.hogwild.reads import ReadsPlan, Tables, turned_back

BLOCK_N = 64  # keys a tile
# Splits are sized so a layer's programs (classes x KV heads x splits) fill the GPU about twice;
# a split holds at least MIN_SPLIT keys, so short contexts stay in one program per class and head.
MIN_SPLIT = 256
_DTYPES = (torch.float32, torch.bfloat16)

LayerAttention = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (qkv, this layer's cache) -> [T, q*D]


@dataclass(frozen=True, slots=True)
class TritonReads:
    """What each query token of a forward reads (int32 tensors on the cache's device)."""

    key_slots: torch.Tensor  # [K]: each class's slots, class after class
    key_run: torch.Tensor  # [K]: each slot's run in its class (Hogwild!; a plain decode's is unused)
    class_keys: torch.Tensor  # [C]: where the class's slots begin
    class_tokens: torch.Tensor  # [T]: the tokens, class after class
    class_start: torch.Tensor  # [C + 1]
    key_count: torch.Tensor  # [T]: how many of its class's slots token t reads
    rot_base: torch.Tensor  # [T]: token t's first rotation
    # cos and signed-sin [rotations, D] fp32; None: the queries come rotated
    rotations: tuple[torch.Tensor, torch.Tensor] | None
    num_classes: int
    max_class: int  # tokens in the largest class
    max_count: int  # keys the longest reader reads


def enabled(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the engine's decode and Hogwild! attention on this device and dtype go through the kernel."""
    mode = os.environ.get("PARAGEN_TRITON_ATTENTION", "1")
    if mode == "0" or dtype not in _DTYPES or not _has_triton():
        return False
    interpret = mode == "interpret" and os.environ.get("TRITON_INTERPRET") == "1"
    return device.type == "cuda" or (device.type == "cpu" and interpret)


@functools.cache
def _has_triton() -> bool:
    return importlib.util.find_spec("triton") is not None


def decode_reads(
    tables: torch.Tensor, lengths: torch.Tensor, max_length: int, block_size: int
) -> TritonReads:
    """What a plain decode reads, built on the device: row r reads its first ``lengths[r]`` slots through
    its block table (``tables`` [B, blocks] on the device, padded with any block), its query rotated."""
    rows, device = len(tables), tables.device
    every = (tables.unsqueeze(2) * block_size + torch.arange(block_size, device=device)).view(rows, -1)
    every = every.to(torch.int32)
    steps = torch.arange(rows + 1, device=device, dtype=torch.int32)
    return TritonReads(
        key_slots=every.view(-1),
        key_run=every.view(-1),  # unused without rotations
        class_keys=steps[:rows] * every.shape[1],
        class_tokens=steps[:rows],
        class_start=steps,
        key_count=lengths.to(torch.int32),
        rot_base=steps[:rows],  # unused
        rotations=None,
        num_classes=rows,
        max_class=1,
        max_count=max_length,
    )


MAX_TOKENS = 8  # tokens of a class scored together (a larger class is cut into parts that share its keys)


@dataclass(frozen=True, slots=True)
class HostReads:
    """What a Hogwild! pass's tokens read, on the host: ``TritonReads``' int32 fields in order, and each
    rotation's position and shift (its cos and sin rows: ``turned_back``)."""

    ints: list[array[int]]
    positions: array[int]
    shifts: array[int]
    num_classes: int
    max_class: int
    max_count: int


def hogwild_arrays(plan: ReadsPlan) -> HostReads:
    """The pass's plan (``hogwild/reads.py``) as the kernel reads it: each class's slots, each slot's
    run, each token's count and its rotations (one per run); a class is cut into parts of MAX_TOKENS
    tokens that share its slots."""
    positions, shifts = array("i"), array("i")
    token_rot, counts = array("i", [0]) * plan.num_tokens, array("i", [0]) * plan.num_tokens
    parts: list[array[int]] = [array("i") for _ in range(5)]  # slots, runs, class keys, tokens, starts
    slots, runs, keys, tokens, starts = parts
    starts.append(0)
    max_class = num_classes = 0
    for one in plan.classes:
        first = len(slots)
        slots += one.slots
        for run in range(len(one.run_starts) - 1):
            runs += array("i", [run]) * one.run_length(run)
        for at in range(0, len(one.tokens), MAX_TOKENS):
            keys.append(first)
            tokens.extend(one.tokens[at : at + MAX_TOKENS])
            starts.append(len(tokens))
            max_class, num_classes = max(max_class, len(one.tokens[at : at + MAX_TOKENS])), num_classes + 1
        for token, count, position, run_shifts in zip(
            one.tokens, one.counts, one.positions, one.shifts, strict=True
        ):
            counts[token], token_rot[token] = count, len(positions)
            positions += array("i", [position]) * len(run_shifts)
            shifts += array("i", run_shifts)
    return HostReads([*parts, counts, token_rot], positions, shifts, num_classes, max_class, max(counts))


def hogwild_reads(plan: ReadsPlan, tables: Tables, device: torch.device) -> TritonReads:
    """What a Hogwild! pass's tokens read, on ``device`` (the host's arrays sent in one copy)."""
    arrays = hogwild_arrays(plan)
    sizes = [len(part) for part in arrays.ints]
    joined = array("i")
    for part in arrays.ints:
        joined += part
    ints = torch.frombuffer(joined, dtype=torch.int32).to(device)
    cos, sin = turned_back(tables, torch.tensor(arrays.positions), torch.tensor(arrays.shifts))
    rotations = (cos.to(device, torch.float32).contiguous(), sin.to(device, torch.float32).contiguous())
    key_slots, key_run, class_keys, tokens, starts, counts, rot = torch.split(ints, sizes)
    return TritonReads(
        key_slots, key_run, class_keys, tokens, starts, counts, rot, rotations,
        arrays.num_classes, arrays.max_class, arrays.max_count,
    )  # fmt: skip


def attention(
    reads: TritonReads, *, num_heads: int, num_kv_heads: int, head_dim: int, scale: float
) -> LayerAttention:
    """The layers' attention over ``reads`` (buffers and launch shapes set up once a forward)."""
    from paragen.engine.kernels.triton_kernels import kernels

    device = reads.class_start.device
    partial, combine = kernels()
    group = num_heads // num_kv_heads
    group_p = pow2(group)
    tokens_p = max(pow2(reads.max_class), -(-16 // group_p))  # a score matmul has 16 rows at least
    num_tokens = len(reads.key_count)
    split = _split(reads, num_kv_heads, device)
    splits = -(-reads.max_count // split)
    final = splits == 1
    shape = (splits, num_tokens, num_heads)
    part_m = torch.empty(shape if not final else (1,), dtype=torch.float32, device=device)
    part_l = torch.empty_like(part_m)
    part_acc = torch.empty((*shape, head_dim) if not final else (1,), dtype=torch.float32, device=device)
    cos, sin = reads.rotations if reads.rotations is not None else (part_m, part_m)
    grid = (splits, reads.num_classes, num_kv_heads)
    dp = max(16, pow2(head_dim))

    def attend(qkv: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        out = torch.empty(num_tokens, num_heads * head_dim, dtype=qkv.dtype, device=device)
        partial[grid](
            kv, qkv, cos, sin, reads.key_slots, reads.key_run, reads.class_keys, reads.class_tokens,
            reads.class_start, reads.key_count, reads.rot_base, part_m, part_l, part_acc, out,
            kv.shape[1], qkv.shape[1] * head_dim, num_tokens, split, scale,
            HEADS=num_heads, KV_HEADS=num_kv_heads, GROUP=group, D=head_dim, TOKENS=tokens_p,
            GROUP_P=group_p, DP=dp, BLOCK_N=BLOCK_N, ROTATE=reads.rotations is not None,
            F32=kv.dtype == torch.float32 or device.type != "cuda", FINAL=final,
        )  # fmt: skip
        if not final:
            combine[(num_tokens * num_heads,)](
                part_m, part_l, part_acc, out, splits, num_tokens * num_heads,
                D=head_dim, DP=dp, SPLITS=pow2(splits),
            )  # fmt: skip
        return out

    return attend


def _split(reads: TritonReads, num_kv_heads: int, device: torch.device) -> int:
    """Keys a program reads: enough programs for about two waves over the GPU's multiprocessors."""
    if SPLIT_KEYS:
        return SPLIT_KEYS
    programs = 2 * _multiprocessors(device)
    per = programs // max(1, reads.num_classes * num_kv_heads)
    split = -(-reads.max_count // max(1, per))
    return max(MIN_SPLIT, -(-split // BLOCK_N) * BLOCK_N)


SPLIT_KEYS = 0  # a fixed split (tests: many splits over short views); 0: sized to the GPU


@functools.cache
def _multiprocessors(device: torch.device) -> int:
    if device.type != "cuda":
        return 1
    return int(torch.cuda.get_device_properties(device).multi_processor_count)


def pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()
