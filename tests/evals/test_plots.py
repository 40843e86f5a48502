"""The Pareto plot: distinct styles for twenty strategies, a title naming task, model and date,
a note naming settings with no point, and n= labels that do not sit on one another."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evals.report.plots import (
    STYLES,
    missing_settings,
    plot_pareto,
    plot_title,
    spread_labels,
    strategy_styles,
)

pytest.importorskip("matplotlib")


def _row(strategy: str, n: int, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "task": "arith", "strategy": strategy, "n": n, "folder": "", "accuracy": 0.5, "ci_low": 0.3,
        "ci_high": 0.7, "latency_mean": 1.0, "total_tokens": 100.0, "sequential_tokens": 50.0,
        "reasoning_tokens": 0.0, "outcomes": {"correct": 5, "incorrect": 5},
    }  # fmt: skip
    return row | extra


def _run_dir(tmp_path: Path, strategies: list[dict[str, Any]]) -> Path:
    run = tmp_path / "run-folder-name"
    run.mkdir()
    info = {
        "started_at": 1767225600.0,
        "settings": {"task": "arith", "backend": "engine:HuggingFaceTB/SmolLM2-135M"},
    }
    (run / "run.json").write_text(json.dumps(info | {"strategies": strategies}), encoding="utf-8")
    return run


def test_twenty_strategies_get_distinct_colour_marker_pairs() -> None:
    names = [f"strategy{i:02d}" for i in range(20)]
    styles = strategy_styles(names)
    assert len(set(styles.values())) == 20
    assert len({colour for colour, _ in STYLES}) == 20  # no two share a colour either
    # neighbours in the sorted list (budget_forcing, deepconf) never share a hue's family
    assert styles["strategy00"][0] != styles["strategy01"][0]


def test_title_names_task_model_and_date(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, [])
    title = plot_title([_row("majority", 4)], [run])
    assert "arith" in title
    assert "engine:HuggingFaceTB/SmolLM2-135M" in title
    assert "2026-01-0" in title  # the start day (local time)
    assert run.name not in title


def test_title_prefers_a_model_field_and_survives_a_bad_run_json(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, [])
    info = json.loads((run / "run.json").read_text()) | {"model": "Qwen3-0.6B"}
    (run / "run.json").write_text(json.dumps(info))
    assert "Qwen3-0.6B" in plot_title([_row("single", 1)], [run])
    (run / "run.json").write_text("{not json")
    assert "arith" in plot_title([_row("single", 1)], [run])  # the folder's mtime gives the date


def test_note_names_failed_and_unrecorded_settings(tmp_path: Path) -> None:
    planned = [{"name": "majority", "n": 4, "config": {}}, {"name": "ffs", "n": 8, "config": {}}]
    run = _run_dir(tmp_path, planned)
    rows = [_row("majority", 4), _row("deepconf", 4, outcomes={"failed": 3, "error": 1})]
    notes = missing_settings(rows, [run])
    assert any("deepconf n=4" in note and "failed" in note for note in notes)
    assert any("ffs n=8" in note and "no records" in note for note in notes)
    assert not any("majority" in note for note in notes)


def test_labels_at_one_place_are_spread() -> None:
    lifts = spread_labels([(10.0, 10.0), (10.0, 10.0), (200.0, 10.0)], [(30.0, 10.0)] * 3)
    assert lifts[0] != lifts[1]
    assert lifts[2] == 0.0  # far away: stays where it is


def test_plot_draws_labels_apart_and_writes_the_note(tmp_path: Path) -> None:
    from matplotlib.figure import Figure

    from evals.report.plots import draw_pareto

    run = _run_dir(tmp_path, [{"name": "ffs", "n": 8, "config": {}}])
    rows = [_row("budget_forcing", 4), _row("deepconf", 8), _row("majority", 2, outcomes={"failed": 2})]
    fig = draw_pareto(rows, runs=[run])
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    spots = {tuple(t.get_window_extent().bounds[:2]) for t in ax.texts if t.get_text().startswith("n=")}
    assert len(spots) == 2  # the two points share a place, their labels do not
    notes = " ".join(t.get_text() for t in fig.texts)
    assert "majority n=2" in notes and "ffs n=8" in notes
    assert "arith" in fig.get_suptitle()
    path = plot_pareto(rows, tmp_path / "pareto.png", runs=[run])
    assert path.stat().st_size > 0


def test_a_failed_save_keeps_the_earlier_plot_and_leaves_no_figure_or_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    path = plot_pareto([_row("single", 1)], tmp_path / "pareto.png")
    earlier = path.read_bytes()

    def half_written(self: Figure, fname: Path, **_: Any) -> None:
        Path(fname).write_bytes(b"\x89PNG half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", half_written)
    open_figures = plt.get_fignums()
    with pytest.raises(OSError, match="No space left"):
        plot_pareto([_row("single", 1), _row("majority", 4)], path)
    assert path.read_bytes() == earlier
    assert [p.name for p in tmp_path.iterdir()] == ["pareto.png"]
    assert plt.get_fignums() == open_figures  # the failed one is closed
