"""HMMT February 2025 from MathArena's hub dataset, in MathArena's prompt (see evals.tasks.matharena)."""

from __future__ import annotations

from evals.tasks.matharena import matharena_task

TASK = matharena_task(
    "hmmt_feb25",
    "MathArena/hmmt_feb_2025",
    "HMMT February 2025: 30 problems (hub only, held out)",
    prompt="matharena",
)
