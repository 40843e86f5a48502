"""AIME 2026 I+II from MathArena's hub dataset, in MathArena's prompt (see evals.tasks.matharena)."""

from __future__ import annotations

from evals.tasks.matharena import matharena_task

TASK = matharena_task(
    "aime26",
    "MathArena/aime_2026",
    "AIME 2026 I+II: 30 problems, integer answers 0-999 (hub only, held out)",
    prompt="matharena-aime",
)
