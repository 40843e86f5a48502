"""AMC 2023 (the 40 numeric-answer problems of 12A/12B used by Qwen2.5-Math, LIMO, simpleRL)."""

from __future__ import annotations

from evals.tasks.base import Fields, HubSource, Task

TASK = Task(
    name="amc23",
    description="AMC 2023: 40 problems with numeric answers (no answer choices)",
    hub=HubSource(
        "math-ai/amc23",
        split="test",
        # pinned by several public harnesses (40 rows; fields id, question, answer, url);
        # not fetched from here (no network): a wrong pin fails loudly, see evals.tasks.loading
        revision="80815d37005feb82cd7f8fbc6901d5d3eff43057",
        fields=Fields("question", "answer", "id"),
        rows=40,
    ),
    bundled="amc23.jsonl",
    grading="boxed",
)
