"""A benchmark as data: where its rows live, how a row becomes a Problem, how it is graded.

Loading lives in :mod:`evals.tasks.loading`. Hub and bundled copies name their fields
differently, so each source carries its own :class:`Fields` mapping.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paragen.answers import ExtractMode

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
_GSM_GOLD = re.compile(r"####\s*(.+)$", re.S)


def gsm8k_gold(answer: str) -> str:
    """The final number of a GSM8K hub answer ("... #### 1,234" -> "1234")."""
    found = _GSM_GOLD.search(answer)
    return (found.group(1) if found else answer).strip().replace(",", "")


@dataclass(frozen=True)
class Fields:
    """Which row fields hold the question, the gold answer and the id (``None`` id = row index)."""

    question: str = "problem"
    answer: str | None = "answer"  # None: the rows have no gold answer (proofs)
    id: str | None = "id"
    gold: Callable[[str], str] | None = None  # turns the answer field into the gold answer
    # Proof tasks: the field with each problem's grading guideline (text, or MathArena's list of
    # {title, points, desc}) and the one with its reference solution (None: the source has none).
    guideline: str | None = None
    reference: str | None = None


@dataclass(frozen=True)
class HubSource:
    """A hub dataset pinned to a revision."""

    repo: str
    split: str = "test"
    config: str | None = None
    revision: str | None = None
    fields: Fields = field(default_factory=Fields)
    rows: int | None = None  # how many rows the pinned split has; another count is a failed load


@dataclass(frozen=True)
class Task:
    """One benchmark: its sources, field mappings and grading mode."""

    name: str
    description: str
    hub: HubSource | None = None
    bundled: str | None = None  # a JSONL file under evals/data, or an absolute path
    bundled_fields: Fields = field(default_factory=Fields)
    grading: ExtractMode = "auto"
    generate: Callable[[], list[dict[str, Any]]] | None = None
    file_format: str = "json"  # the `datasets` builder for a local file: json, csv or parquet
    note: str = ""
    # (prediction, gold) -> correct, replacing math-verify for tasks whose answers are not math
    # (Game of 24 expressions, the LLMCompiler sets' text); a top-level function, so it pickles.
    equivalence: Callable[[str, str], bool] | None = None
    prompt: str = "paragen"  # the prompt template a run uses unless --prompt names another
    # Graded by LLM judges against each problem's guideline (evals.run.judging), not by math-verify;
    # a run needs --judge.
    proof: bool = False

    def bundled_path(self) -> Path:
        assert self.bundled is not None
        path = Path(self.bundled)
        return path if path.is_absolute() else DATA_DIR / path
