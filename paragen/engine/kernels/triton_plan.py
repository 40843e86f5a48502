"""The Triton attention kernel's plan (``triton_attention.py``): plain data, so that ``attention.py`` can
name it in ``AttnMeta`` without importing the kernel's module (which imports ``attention.py``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class Plan:
    """What each query token of a forward reads (int32 tensors on the cache's device)."""

    key_slots: torch.Tensor  # [K]: each class's slots, class after class
    key_run: torch.Tensor  # [K]: each slot's run in its class (Hogwild!; a plain decode's is unused)
    class_keys: torch.Tensor  # [C]: where the class's slots begin
    class_tokens: torch.Tensor  # [T]: the tokens, class after class
    class_start: torch.Tensor  # [C + 1]
    key_count: torch.Tensor  # [T]: how many of its class's slots token t reads
    rot_base: torch.Tensor  # [T]: token t's first rotation
    rotations: (
        tuple[torch.Tensor, torch.Tensor] | None
    )  # cos and signed-sin [rotations, D] fp32; None: the queries come rotated
    num_classes: int
    max_class: int  # tokens in the largest class
    max_count: int  # keys the longest reader reads
