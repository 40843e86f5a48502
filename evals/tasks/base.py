"""A benchmark as data: where its rows live, how a row becomes a Problem, how it is graded.

Rows are always a ``datasets.Dataset``: from the hub (``load_dataset(hub_id, config,
split=, revision=)``) when it can be reached, else from the bundled copy under
``evals/data`` through ``load_dataset("json", data_files=...)``, or generated
(``Dataset.from_list``) for synthetic tasks. Hub and bundled copies name their fields
differently, so each source carries its own :class:`Fields` mapping.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from paragen.answers import ExtractMode
from paragen.errors import ConfigError
from paragen.types import Problem

if TYPE_CHECKING:
    from datasets import Dataset

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
_HUB_HOST = ("huggingface.co", 443)
_GSM_GOLD = re.compile(r"####\s*(.+)$", re.S)


def gsm8k_gold(answer: str) -> str:
    """The final number of a GSM8K hub answer ("... #### 1,234" -> "1234")."""
    found = _GSM_GOLD.search(answer)
    return (found.group(1) if found else answer).strip().replace(",", "")


@dataclass(frozen=True)
class Fields:
    """Which row fields hold the question, the gold answer and the id (``None`` id = row index)."""

    question: str = "problem"
    answer: str = "answer"
    id: str | None = "id"
    gold: Callable[[str], str] | None = None  # turns the answer field into the gold answer


@dataclass(frozen=True)
class HubSource:
    """A hub dataset pinned to a revision."""

    repo: str
    split: str = "test"
    config: str | None = None
    revision: str | None = None
    fields: Fields = field(default_factory=Fields)


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

    def load(self, *, offline: bool | None = None) -> tuple[Dataset, Fields, str]:
        """The rows, the field mapping that fits them, and where they came from."""
        from datasets import Dataset, load_dataset

        if self.generate is not None:
            return Dataset.from_list(self.generate()), self.bundled_fields, "generated"
        offline = hub_offline() if offline is None else offline
        if self.hub is not None and not offline:
            loaded = _try_hub(self.hub)
            if loaded is not None:
                return loaded, self.hub.fields, f"hub:{self.hub.repo}@{self.hub.revision or 'main'}"
        if self.bundled is not None:
            path = self.bundled_path()
            rows = load_dataset(self.file_format, data_files=str(path), split="train")
            return rows, self.bundled_fields, f"bundled:{path.name}"
        where = f"the hub ({self.hub.repo})" if self.hub else "no hub copy either"
        raise ConfigError(
            f"task {self.name!r} has no bundled copy and {where} cannot be reached offline",
            hint=self.note or "run with network access or pass a local file as the task",
        )

    def bundled_path(self) -> Path:
        assert self.bundled is not None
        path = Path(self.bundled)
        return path if path.is_absolute() else DATA_DIR / path

    def to_problem(self, row: dict[str, Any], fields: Fields, index: int) -> Problem:
        """One row as a Problem; the gold answer and the row's extra fields ride along."""
        question, answer = row.get(fields.question), row.get(fields.answer)
        if not isinstance(question, str) or not question.strip():
            raise ConfigError(f"task {self.name!r}: row {index} has no text in field {fields.question!r}")
        gold = None if answer is None else str(answer)
        if gold is not None and fields.gold is not None:
            gold = fields.gold(gold)
        pid = str(row[fields.id]) if fields.id and row.get(fields.id) is not None else f"{self.name}-{index}"
        meta = {k: v for k, v in row.items() if k in ("level", "subject", "type") and v is not None}
        return Problem(id=pid, question=question, gold=gold, meta={"task": self.name, **meta})


def hub_offline(timeout_s: float = 1.5) -> bool:
    """Whether the hub should be skipped: the HF offline switches, or no connection within ``timeout_s``."""
    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on"):
            return True
    try:
        with socket.create_connection(_HUB_HOST, timeout=timeout_s):
            return False
    except OSError:
        return True


def _try_hub(hub: HubSource) -> Dataset | None:
    from datasets import load_dataset

    try:
        return load_dataset(hub.repo, hub.config, split=hub.split, revision=hub.revision)
    except Exception:  # any hub failure falls back to the bundled copy, which is the point
        return None


@dataclass(frozen=True)
class Selection:
    """Which rows to run: shuffle (seeded), pick ids, then offset and limit."""

    limit: int | None = None
    offset: int = 0
    ids: Sequence[str] = ()
    shuffle: bool = False
    seed: int = 0


def load_problems(
    task: Task, selection: Selection | None = None, *, offline: bool | None = None
) -> list[Problem]:
    """The task's problems after ``selection``; one ConfigError line when nothing fits."""
    selection = selection or Selection()
    rows, fields, _ = task.load(offline=offline)
    if selection.shuffle:
        rows = rows.shuffle(seed=selection.seed)
    problems = [task.to_problem(dict(row), fields, i) for i, row in enumerate(rows)]
    if selection.ids:
        wanted = set(selection.ids)
        problems = [p for p in problems if p.id in wanted]
        missing = wanted - {p.id for p in problems}
        if missing:
            raise ConfigError(f"task {task.name!r} has no problem with id {sorted(missing)[0]!r}")
    end = None if selection.limit is None else selection.offset + selection.limit
    chosen = problems[selection.offset : end]
    if not chosen:
        raise ConfigError(f"task {task.name!r}: the selection is empty", hint="check --offset/--limit/--ids")
    return chosen
