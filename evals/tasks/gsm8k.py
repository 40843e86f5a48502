"""GSM8K test split (openai/gsm8k, "main"); gold = the number after "####"."""

from __future__ import annotations

from evals.tasks.base import Fields, HubSource, Task, gsm8k_gold

TASK = Task(
    name="gsm8k",
    description="GSM8K grade-school math word problems (test split; 1219 bundled, 100 held out)",
    hub=HubSource(
        "openai/gsm8k",
        split="test",
        config="main",
        # pinned by several public harnesses with this row count; not fetched from here (no network)
        revision="cc7b047b6e5bb11b4f1af84efc572db110a51b3c",
        fields=Fields("question", "answer", None, gsm8k_gold),
        rows=1319,
    ),
    bundled="gsm8k_test.jsonl",
    grading="auto",
)
