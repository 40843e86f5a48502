"""MATH-500 (the PRM800K subset of the MATH test set); LaTeX gold answers graded by math-verify."""

from __future__ import annotations

from evals.tasks.base import Fields, HubSource, Task

TASK = Task(
    name="math500",
    description="MATH-500: 500 competition problems, levels 1-5, LaTeX answers",
    hub=HubSource(
        "HuggingFaceH4/MATH-500",
        split="test",
        # pinned by several public harnesses with this row count; not fetched from here (no network)
        revision="6e4ed1a2a79af7d8630a6b768ec859cb5af4d3be",
        fields=Fields("problem", "answer", "unique_id"),
        rows=500,
    ),
    bundled="math500.jsonl",
    grading="boxed",
)
