"""The rows and samples of a shared session's forward (Hogwild!): plain data, importable from anywhere.

They live in the engine so that ``paragen/engine/hogwild`` needs nothing from the backends;
``paragen/backends/base.py`` re-exports them, where the protocol that uses them is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SharedRow:
    """One worker's input to a shared session's forward pass (see docs/hogwild.md)."""

    worker: int  # which worker's sampler stream (seed = params.seed + worker)
    view: Sequence[int]  # segment ids, in order; the input tokens are appended to view[-1]
    # >= 1 input tokens written into view[-1]; every row writes (layer by layer) before any row reads,
    # so peers see each other's new tokens in the same forward pass.
    token_ids: Sequence[int]


@dataclass(frozen=True, slots=True)
class SharedSample:
    """The next token sampled from a row's last position."""

    token_id: int
    logprob: float | None = None  # when the session's params ask for logprobs
