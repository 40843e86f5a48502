"""usamo26: see evals.tasks.proofs."""

from __future__ import annotations

from evals.tasks.proofs import USAMO26 as TASK

__all__ = ["TASK"]
