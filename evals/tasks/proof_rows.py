"""A proof row's grading guideline and reference solution, as the text the judges read.

IMO-ProofBench gives its guideline as text; MathArena's proof competitions give a grading scheme,
a list of ``{title, points, desc}`` items, which becomes one line per item ("[2 pts] title: desc").
"""

from __future__ import annotations

from typing import Any

from evals.tasks.base import Fields
from paragen.errors import ConfigError


def proof_meta(row: dict[str, Any], fields: Fields, where: str) -> dict[str, str]:
    """``{"guideline": ..., "reference": ...}`` of a proof row; a row without a guideline is refused."""
    if fields.guideline is None:
        raise ConfigError(f"{where}: the task is graded by judges but names no guideline field")
    guideline = guideline_text(row.get(fields.guideline))
    if not guideline:
        raise ConfigError(f"{where} has no grading guideline in field {fields.guideline!r}")
    meta = {"guideline": guideline}
    reference = row.get(fields.reference) if fields.reference is not None else None
    if isinstance(reference, str) and reference.strip():
        meta["reference"] = reference.strip()
    return meta


def guideline_text(value: Any) -> str:
    """A guideline as text: text as given, a grading scheme one item a line ("" when there is none)."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list):
        lines = [_scheme_line(item) for item in value if isinstance(item, dict)]
        return "\n".join(line for line in lines if line)
    return ""


def _scheme_line(item: dict[str, Any]) -> str:
    title = str(item.get("title") or "").strip()
    desc = str(item.get("desc") or item.get("grading_scheme_desc") or "").strip()
    points = item.get("points")
    head = f"[{points} pts] " if isinstance(points, int | float) else ""
    return f"{head}{title}: {desc}" if title and desc else f"{head}{title or desc}"
