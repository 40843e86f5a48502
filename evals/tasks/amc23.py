"""AMC 2023 (the 40 numeric-answer problems of 12A/12B used by Qwen2.5-Math, LIMO, simpleRL)."""

from __future__ import annotations

from evals.tasks.base import Fields, HubSource, Task

TASK = Task(
    name="amc23",
    description="AMC 2023: 40 problems with numeric answers (no answer choices)",
    # No revision of math-ai/amc23 could be found to pin from here (no network): it follows main.
    hub=HubSource("math-ai/amc23", split="test", fields=Fields("question", "answer", "id"), rows=40),
    bundled="amc23.jsonl",
    grading="boxed",
)
