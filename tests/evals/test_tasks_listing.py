"""`paragen tasks` fits the terminal: the description column is cut with an ellipsis."""

from __future__ import annotations

import pytest

from evals.cli.tasks import task_lines, tasks_command


def test_tasks_fit_100_columns(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    tasks_command()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("task") and any(line.startswith("gsm8k ") for line in lines)
    assert max(len(line) for line in lines) <= 100
    assert any(line.endswith("...") for line in lines)  # gsm8k's description is longer than its room


def test_a_short_description_is_kept_whole() -> None:
    [_, line] = task_lines([("t", "generated", "-", "short words")], width=100)
    assert line.endswith("short words")
    [_, cut] = task_lines([("t", "generated", "-", "word " * 40)], width=60)
    assert len(cut) == 60 and cut.endswith("...")
