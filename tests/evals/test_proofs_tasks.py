"""Proof tasks through the one loader: the bundled proofs_mini set, and IMO-ProofBench and USAMO 2026
read through their hub loader from small local stand-ins (the hub cannot be reached here)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import datasets
import pytest

from evals.tasks import get_task, load_problems, load_task, task_names
from evals.tasks.proof_rows import guideline_text
from evals.tasks.proofs import PROOF_FIELDS, REVISIONS
from paragen.errors import ConfigError

FIXTURES = Path(__file__).resolve().parent / "data" / "proofs"


def test_the_bundled_set_carries_a_guideline_and_a_reference_per_problem() -> None:
    task = get_task("proofs_mini")
    problems = load_problems(task, offline=True)
    assert "proofs_mini" in task_names() and task.proof and task.hub is None
    assert len(problems) == 6 and len({p.id for p in problems}) == 6
    assert problems[0].id == "odd-sum" and problems[0].gold is None
    for problem in problems:
        assert (
            problem.meta["guideline"].startswith("(7 points)") and "(0 points)" in problem.meta["guideline"]
        )
        assert problem.meta["reference"] and problem.meta["task"] == "proofs_mini"


@pytest.mark.parametrize(
    ("name", "folder", "ids", "guideline"),
    [
        ("imo_proofbench", "IMOProofBench", ["PB-Test-001", "PB-Test-002"], "(7 points) Shows one"),
        (
            "usamo26",
            "usamo_2026",
            ["1", "2"],
            "[3 pts] Factorisation: Writes n^2 + n = n(n+1).\n[4 pts] Parity",
        ),
    ],
)
def test_hub_tasks_load_through_the_hub_loader(
    name: str, folder: str, ids: list[str], guideline: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = get_task(name)
    assert task.proof and task.hub is not None and task.bundled is None
    pinned = REVISIONS[task.hub.repo]
    assert task.hub.revision == pinned
    local = replace(task, hub=replace(task.hub, repo=str(FIXTURES / folder), rows=2))
    monkeypatch.setattr("evals.tasks.loading.hub_offline", lambda: None)
    asked: list[object] = []
    real = datasets.load_dataset

    def spy(*args: Any, **kwargs: Any) -> Any:
        asked.append(kwargs.get("revision"))
        return real(*args, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", spy)
    loaded = load_task(local, source="hub")
    assert asked == [pinned]  # IMO-ProofBench at its pin; USAMO 2026 unpinned (None: the hub's main)
    assert [p.id for p in loaded.problems] == ids
    assert loaded.problems[0].meta["guideline"].startswith(guideline)
    assert all(p.meta["reference"] and p.gold is None for p in loaded.problems)


def test_the_pins() -> None:
    assert REVISIONS["lm-provers/IMOProofBench"] == "4b02dfebc3a956682398ce5847d56d0e820a758d"
    assert REVISIONS["MathArena/usamo_2026"] is None
    assert "not pinned" in get_task("usamo26").note


@pytest.mark.parametrize("name", ["imo_proofbench", "usamo26"])
def test_without_the_hub_it_says_so_in_one_line(name: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_problems(get_task(name), offline=True)
    line = caught.value.one_line()
    assert get_task(name).hub.repo in line and "\n" not in line  # type: ignore[union-attr]


def test_a_row_without_a_guideline_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "proofs.jsonl"
    path.write_text(json.dumps({"id": "a", "problem": "Prove 1 = 1.", "grading_guidelines": " "}) + "\n")
    task = replace(get_task("proofs_mini"), bundled=str(path), bundled_fields=PROOF_FIELDS)
    with pytest.raises(ConfigError, match="row 0 has no grading guideline in field 'grading_guidelines'"):
        load_problems(task, offline=True)


def test_a_grading_scheme_becomes_one_line_per_item() -> None:
    scheme = [{"title": "Setup", "points": 2, "desc": "Sets up p/q."}, {"title": "End", "desc": "Concludes."}]
    assert guideline_text(scheme) == "[2 pts] Setup: Sets up p/q.\nEnd: Concludes."
    assert guideline_text("  text ") == "text" and guideline_text(None) == ""
