"""The LLMCompiler paper's JSON sets (HotpotQA comparison, movie recommendation, ParallelQA).

They need a search tool; offline, that is the ``lookup`` tool over a folder of documents the
user provides (``lookup_root``). Grading follows the reference code: normalized exact match,
and numeric answers accepted within 10%.
"""

from __future__ import annotations

import json
import re
import string
from pathlib import Path
from typing import Any

from paragen.errors import ConfigError
from paragen.types import Problem

DATA = Path(__file__).resolve().parent.parent / "data" / "llmcompiler"
SETS = {
    "hotpotqa_comparison": "hotpotqa_comparison.json",
    "movie_recommendation": "movie_recommendations_formatted.json",
    "parallelqa": "parallelqa_dataset.json",
}


def load_set(name: str, limit: int | None = None) -> list[Problem]:
    """One of :data:`SETS` as problems (the first ``limit`` rows)."""
    if name not in SETS:
        raise ConfigError(f"unknown LLMCompiler set {name!r}", hint=f"one of {sorted(SETS)}")
    rows = json.loads((DATA / SETS[name]).read_text(encoding="utf-8"))[:limit]
    return [
        Problem(
            id=f"{name}-{row['id']}",
            question=row["question"].strip(),
            gold=str(row["answer"]),
            meta={"task": name, **({"branch": row["branch"]} if "branch" in row else {})},
        )
        for row in rows
    ]


def set_rows(name: str) -> list[dict[str, Any]]:
    """One of :data:`SETS` as harness rows (id, problem, answer)."""
    return [{"id": p.id, "problem": p.question, "answer": p.gold} for p in load_set(name)]


def strategy_options(lookup_root: str | None) -> dict[str, Any]:
    """Options for ``llmcompiler`` / ``react`` here: lookup over the user's documents, a calculator."""
    if not lookup_root or not Path(lookup_root).exists():
        raise ConfigError(
            "the LLMCompiler sets need a document store for the lookup tool",
            hint="pass a folder of .txt/.md/.json documents (e.g. Wikipedia intros of the entities)",
        )
    return {"tools": ("lookup", "calculator"), "tool_options": {"lookup": {"root": lookup_root}}}


def normalize_answer(text: str) -> str:
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def grade(prediction: str | None, gold: str) -> bool:
    """Normalized exact match; numbers match within 10% (as the reference evaluation does)."""
    if prediction is None:
        return False
    pred, ref = _number(prediction), _number(gold)
    if pred is not None and ref is not None:
        return abs(pred - ref) <= 0.1 * abs(ref)
    return normalize_answer(prediction) == normalize_answer(gold)


def _number(text: str) -> float | None:
    try:
        return float(text.strip().replace(",", ""))
    except ValueError:
        return None


__all__ = ["SETS", "grade", "load_set", "normalize_answer", "set_rows", "strategy_options"]
