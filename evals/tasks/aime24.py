"""AIME 2024 I and II (30 integer-answer problems)."""

from __future__ import annotations

from evals.tasks.base import Fields, HubSource, Task

TASK = Task(
    name="aime24",
    description="AIME 2024 I+II: 30 problems, integer answers 0-999",
    hub=HubSource(
        "HuggingFaceH4/aime_2024",
        split="train",
        # pinned by several public harnesses with this row count; not fetched from here (no network)
        revision="2fe88a2f1091d5048c0f36abc874fb997b3dd99a",
        fields=Fields("problem", "answer", "id"),
        rows=30,
    ),
    bundled="aime2024.jsonl",
    grading="boxed",
)
