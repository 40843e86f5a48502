"""BRUMO 2025 from MathArena's hub dataset, in MathArena's prompt (see evals.tasks.matharena)."""

from __future__ import annotations

from evals.tasks.matharena import matharena_task

TASK = matharena_task(
    "brumo25", "MathArena/brumo_2025", "BRUMO 2025: 30 problems (hub only, held out)", prompt="matharena"
)
