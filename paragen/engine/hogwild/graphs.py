"""A Hogwild! pass of a few tokens a row replayed from a CUDA graph (``cuda_graphs.Graphs``).

The pass's inputs are its token ids, positions and cache slots, each row's last token, and what its
tokens read (``triton_attention.hogwild_arrays``: each class's slots and runs, each rotation's position and
shift), all in the graph's one int32 buffer; the rotations' cos and sin rows are made inside the
graph. Shapes are bucketed so that a growing context keeps its graph: the keys are padded to a
multiple of ``cuda_graphs.BUCKET_KEYS``, the rotations to a power of two (padding is never read:
each token reads only its own count of keys).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from paragen.engine.attention import AttnMeta
from paragen.engine.cuda_graphs import Forward, Graphs, rounded_keys
from paragen.engine.hogwild.reads import ReadsPlan, Tables, turned_back
from paragen.engine.kernels import triton_attention
from paragen.engine.kernels.triton_attention import TritonReads


def replay_pass(
    graphs: Graphs,
    plan: ReadsPlan,
    ids: list[int],
    pos: list[int],
    slots: list[int],
    last: list[int],
    tables: Tables,
) -> torch.Tensor:
    """[rows, vocab] fp32: a Hogwild! pass's logits at each row's last token (the graph's own buffer)."""
    reads = padded_reads(plan)
    ints = array("i", ids) + array("i", pos) + array("i", slots) + array("i", last) + reads.ints
    t = len(ids)
    key = ("shared", t, len(last), *reads.sizes, reads.max_count, reads.max_class)
    return graphs.replay(key, ints, _pass_forward(graphs, [t, t, t, len(last)], reads, tables))


def _pass_forward(graphs: Graphs, sizes: list[int], padded: PaddedReads, tables: Tables) -> Forward:
    model, kv = graphs.model, graphs.kv

    def forward(ints: torch.Tensor) -> torch.Tensor:
        ids, pos, slots, last, fields = torch.split(ints, [*sizes, len(ints) - sum(sizes)])
        attend = triton_attention.attention(
            padded.on_device(fields, tables),
            num_heads=model.num_heads,
            num_kv_heads=model.cfg.num_kv_heads,
            head_dim=model.head_dim,
            scale=model.attn_scale,
        )
        meta = AttnMeta(is_prefill=False, slots=slots.long())
        hidden = model.forward(ids.long(), pos.long(), meta, kv, attend)
        return model.logits(hidden[last.long()])

    return forward


@dataclass(frozen=True, slots=True)
class PaddedReads:
    """What a pass's rows read, padded to their buckets: ``TritonReads``' int fields in order, then
    each rotation's position and shift (its cos and sin rows are made in the graph)."""

    ints: array[int]
    sizes: tuple[int, ...]
    num_classes: int
    max_class: int
    max_count: int

    def on_device(self, ints: torch.Tensor, tables: Tables) -> TritonReads:
        """The reads over ``ints`` (this one's arrays, where the graph reads them)."""
        key_slots, key_run, class_keys, tokens, starts, counts, rot, positions, shifts = torch.split(
            ints, list(self.sizes)
        )
        cos, sin = turned_back(tables, positions.long(), shifts.long())
        return TritonReads(
            key_slots, key_run, class_keys, tokens, starts, counts, rot, (cos.float(), sin.float()),
            self.num_classes, self.max_class, self.max_count,
        )  # fmt: skip


def padded_reads(plan: ReadsPlan) -> PaddedReads:
    """The pass's reads with their keys and rotations padded to their buckets (the graph's shape).

    The classes are not padded: the kernel's grid has a program per class, KV head and split, and
    splits are sized from the classes there are; padding the classes to the tokens would cut a
    4-worker session's programs to a quarter, each reading 4x the keys.
    """
    arrays = triton_attention.hogwild_arrays(plan)
    key_slots, key_run, class_keys, tokens, starts, counts, token_rot = arrays.ints
    num_keys, num_rotations = rounded_keys(len(key_slots)), _bucket(len(arrays.positions))
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
    return PaddedReads(ints, sizes, arrays.num_classes, max_class, rounded_keys(arrays.max_count))


def _bucket(n: int) -> int:
    """The next power of two, at least 16."""
    return max(16, 1 << max(0, n - 1).bit_length())


def _padded(part: Sequence[int], size: int, fill: int = 0) -> array[int]:
    out = array("i", part)
    return out + array("i", [fill]) * (size - len(out))
