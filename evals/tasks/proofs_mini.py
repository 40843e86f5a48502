"""proofs_mini: see evals.tasks.proofs."""

from __future__ import annotations

from evals.tasks.proofs import PROOFS_MINI as TASK

__all__ = ["TASK"]
