"""AIME 2025 I and II: hub only; the project holds it out, so there is no bundled copy."""

from __future__ import annotations

from evals.tasks.base import Fields, HubSource, Task

TASK = Task(
    name="aime25",
    description="AIME 2025 I+II: 30 problems (hub only, held out: no bundled copy)",
    hub=HubSource(
        "math-ai/aime25",
        split="test",
        # pinned by several public harnesses with this row count; not fetched from here (no network)
        revision="563bb8404243c5f09de6ec262f2db674fe5bce9b",
        fields=Fields("problem", "answer", "id"),
        rows=30,
    ),
    bundled=None,
    grading="boxed",
    note="AIME 2025 is held out for independent evaluation",
)
