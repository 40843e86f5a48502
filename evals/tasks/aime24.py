"""AIME 2024 I and II (30 integer-answer problems)."""

from __future__ import annotations

from evals.tasks.base import Fields, HubSource, Task

TASK = Task(
    name="aime24",
    description="AIME 2024 I+II: 30 problems, integer answers 0-999",
    hub=HubSource("HuggingFaceH4/aime_2024", split="train", fields=Fields("problem", "answer", "id")),
    bundled="aime2024.jsonl",
    grading="boxed",
)
