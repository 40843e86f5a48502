"""AIME 2026, HMMT February 2025, BRUMO 2025: MathArena's hub sets, loaded through the tasks' own
hub loader from small local stand-ins (the real sets do not ship and the hub cannot be reached here)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import datasets
import pytest

from evals.tasks import get_task, load_problems, load_task, task_names
from evals.tasks.matharena import REVISIONS
from paragen.errors import ConfigError

FIXTURES = Path(__file__).resolve().parent / "data" / "matharena"
TASKS = {
    "aime26": ("MathArena/aime_2026", "matharena-aime", ["24", "9", "1001"]),
    "hmmt_feb25": ("MathArena/hmmt_feb_2025", "matharena", ["4", "\\sqrt{2}", "\\frac{5}{6}"]),
    "brumo25": ("MathArena/brumo_2025", "matharena", ["7", "\\frac{3}{2}", "32"]),
}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_the_task_names_matharenas_dataset_and_prompt(name: str) -> None:
    repo, prompt, _ = TASKS[name]
    task = get_task(name)
    assert name in task_names()
    assert task.hub is not None and task.hub.repo == repo and task.hub.split == "train"
    assert task.hub.rows == 30 and task.bundled is None and task.prompt == prompt
    assert task.grading == "boxed" and task.hub.revision == REVISIONS[repo]
    assert len(task.hub.revision) == 40 and int(task.hub.revision, 16) >= 0  # a full commit hash


@pytest.mark.parametrize("name", sorted(TASKS))
def test_loaded_through_the_hub_loader(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    repo, _, golds = TASKS[name]
    task = get_task(name)
    assert task.hub is not None
    # The same loader, pointed at a local folder in the hub dataset's layout (load_dataset reads both).
    local = replace(task, hub=replace(task.hub, repo=str(FIXTURES / repo.split("/")[1]), rows=3))
    monkeypatch.setattr("evals.tasks.loading.hub_offline", lambda: None)
    asked: list[object] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        asked.append(kwargs.get("revision"))
        return real(*args, **kwargs)

    real = datasets.load_dataset
    monkeypatch.setattr(datasets, "load_dataset", spy)
    loaded = load_task(local, source="hub")
    assert asked == [REVISIONS[repo]]  # the pinned commit is what the hub is asked for
    assert [p.id for p in loaded.problems] == ["1", "2", "3"]
    assert [p.gold for p in loaded.problems] == golds
    assert all(p.meta["task"] == name for p in loaded.problems)
    source = loaded.source
    assert source.kind == "hub" and source.rows == 3 and source.revision == REVISIONS[repo]


@pytest.mark.parametrize("name", sorted(TASKS))
def test_without_the_hub_it_says_so_in_one_line(name: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_problems(get_task(name), offline=True)
    assert TASKS[name][0] in caught.value.one_line() and "\n" not in caught.value.one_line()
