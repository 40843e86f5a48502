"""imo_proofbench: see evals.tasks.proofs."""

from __future__ import annotations

from evals.tasks.proofs import IMO_PROOFBENCH as TASK

__all__ = ["TASK"]
