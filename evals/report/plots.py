"""Pareto plots: accuracy against latency, total tokens and sequential tokens (and, for runs of a
reasoning model, thinking tokens).

One point per strategy/n with its 95% CI as an error bar, and the Pareto frontier (no other
point is both cheaper and more accurate) drawn as a step line. Each strategy has its own
(colour, marker) pair, so twenty read apart in print and for colour-blind eyes; runs side by
side differ by the marker's fill. The ``n=`` labels are moved up where they would overlap, the
title names the task, the model and the date, and a note under the plot names every setting
that has no point (all its records failed, or it recorded none). Matplotlib runs on the Agg
backend, so no display is needed; the PNG goes beside the records.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from evals.analysis.metrics import Point, pareto_front
from evals.run.records import RETRIED_OUTCOMES
from paragen.errors import ConfigError

MISSING = "matplotlib is not installed"
INSTALL_HINT = "pip install 'paragen[plots]', or pass --no-plot"


def can_plot() -> bool:
    """Whether matplotlib (the ``plots`` extra) imports here."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def require_plotting() -> None:
    """Refuse an asked-for plot before any work is done, when it could not be drawn."""
    if not can_plot():
        raise ConfigError(f"cannot write the plot: {MISSING}", hint=INSTALL_HINT)


AXES = (
    ("latency_mean", "mean latency per problem (s)"),
    ("total_tokens", "total generated tokens per problem"),
    ("sequential_tokens", "sequential (critical-path) tokens per problem"),
)
THINKING_AXIS = ("reasoning_tokens", "thinking tokens per problem (the samples')")

# tab20's ten strong hues first, then their light twins: neighbours in the sorted strategy list
# never share a hue, and a light twin (i + 10) gets another marker than its strong one.
_TAB20 = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
    "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7",
    "#dbdb8d", "#9edae5",
)  # fmt: skip
_MARKER_CYCLE = ("o", "s", "^", "D", "v", "P", "X")
STYLES: tuple[tuple[str, str], ...] = tuple(
    (colour, _MARKER_CYCLE[i % len(_MARKER_CYCLE)]) for i, colour in enumerate(_TAB20)
)
"""Twenty distinct (colour, marker) pairs, one per strategy (the 21st starts over)."""
Fill = Literal["full", "none", "left", "bottom", "right", "top"]
FILLS: tuple[Fill, ...] = ("full", "none", "left", "bottom", "right", "top")
"""The marker's fill per run folder, when runs are drawn side by side."""
LABEL_POINTS = 7  # the n= labels' font size


def strategy_styles(strategies: Sequence[str]) -> dict[str, tuple[str, str]]:
    """Each strategy's (colour, marker), in the order given."""
    return {name: STYLES[i % len(STYLES)] for i, name in enumerate(strategies)}


def plot_pareto(
    rows: Sequence[dict[str, Any]], path: Path, *, title: str = "", runs: Sequence[Path] = ()
) -> Path:
    """Draw the panels for the live summary rows and save them as ``path`` (PNG): three, and a fourth
    of thinking tokens where some row's samples thought. ``runs`` (the run folders) give the title's
    model and date and the settings that recorded nothing; ``title`` replaces the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = draw_pareto(rows, title=title, runs=runs)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    try:  # saved beside it and renamed: a failed save leaves the earlier plot, not half a PNG
        fig.savefig(partial, dpi=fig.dpi, format="png")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
        plt.close(fig)
    return path


def draw_pareto(rows: Sequence[dict[str, Any]], *, title: str = "", runs: Sequence[Path] = ()) -> Any:
    """The figure that :func:`plot_pareto` saves (a matplotlib Figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    notes = missing_settings(rows, runs)
    drawn = [r for r in rows if not _all_failed(r)]
    panels = (*AXES, THINKING_AXIS) if any(r.get("reasoning_tokens") for r in drawn) else AXES
    strategies = sorted({r["strategy"] for r in drawn})
    folders = list(dict.fromkeys(r.get("folder", "") for r in drawn))
    legend_rows = -(-(len(strategies) + len(folders) * (len(folders) > 1) + 1) // 8)
    bottom_in = 0.1 + 0.3 * legend_rows + (0.2 * len(notes) + 0.1 if notes else 0.0)  # legend, notes
    fig, axes = plt.subplots(
        1, len(panels), figsize=(6 * len(panels), 4.4 + bottom_in), squeeze=False, dpi=110
    )
    style = (strategy_styles(strategies), {f: FILLS[i % len(FILLS)] for i, f in enumerate(folders)})
    labels = [_panel(ax, drawn, key, label, style) for ax, (key, label) in zip(axes[0], panels, strict=True)]
    note_in = 0.2 * len(notes) + 0.1 if notes else 0.0
    anchor = (0.5, note_in / fig.get_figheight())
    fig.legend(
        handles=_legend(style, folders), loc="lower center", ncol=8, frameon=False, bbox_to_anchor=anchor
    )
    if notes:
        fig.text(0.01, 0.01, "\n".join(notes), fontsize=8, ha="left", va="bottom", color="dimgray")
    fig.suptitle(title or plot_title(rows, runs))
    fig.tight_layout(rect=(0, bottom_in / fig.get_figheight(), 1, 0.95))
    for ax, points in zip(axes[0], labels, strict=True):
        _place_labels(ax, points)
    return fig


def _legend(style: tuple[dict[str, tuple[str, str]], dict[str, Fill]], folders: list[str]) -> list[Any]:
    from matplotlib.lines import Line2D

    colours, fills = style
    handles = [Line2D([], [], marker=m, linestyle="", color=c, label=s) for s, (c, m) in colours.items()]
    if len(folders) > 1:  # runs side by side: one fill per run
        handles += [
            Line2D([], [], marker="o", fillstyle=fills[f], linestyle="", color="gray", label=f)
            for f in folders
        ]
    handles.append(Line2D([], [], color="black", linestyle="--", label="Pareto frontier"))
    return handles


def _panel(
    ax: Any,
    rows: Sequence[dict[str, Any]],
    key: str,
    label: str,
    style: tuple[dict[str, tuple[str, str]], dict[str, Fill]],
) -> list[tuple[float, float, str]]:
    """One cost axis: every setting with its CI, and the Pareto frontier over all of them (all runs).
    Returns the n= labels to place once the axes have their final size."""
    colours, fills = style
    points, labels = [], []
    for row in rows:
        x = float(row[key])
        if math.isnan(x):
            continue
        acc = float(row["accuracy"])
        err = [[max(0.0, acc - row["ci_low"])], [max(0.0, row["ci_high"] - acc)]]
        colour, marker = colours[row["strategy"]]
        fill = fills[row.get("folder", "")]
        ax.errorbar(x, acc, yerr=err, fmt=marker, color=colour, fillstyle=fill, capsize=3)
        labels.append((x, acc, f"n={row['n']}"))
        points.append(Point(f"{row['strategy']} n={row['n']}", row["strategy"], x, acc))
    front = pareto_front(points)
    if front:
        # Carry the frontier to the costliest point, so a one-point frontier still shows as a line.
        xs = [p.cost for p in front] + [max(p.cost for p in points)]
        ys = [p.accuracy for p in front] + [front[-1].accuracy]
        ax.step(xs, ys, where="post", linestyle="--", color="black", linewidth=1)
        ax.scatter(xs[:-1], ys[:-1], s=120, facecolors="none", edgecolors="black", linewidths=1)
    ax.set_xlabel(label)
    ax.set_ylabel("accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(True, alpha=0.3)
    return labels


def _place_labels(ax: Any, labels: list[tuple[float, float, str]]) -> None:
    """Write the n= labels beside their points, each moved up past the ones it would cover."""
    to_px = ax.transData.transform
    px_per_pt = ax.figure.dpi / 72
    anchors = [tuple(to_px((x, y))) for x, y, _ in labels]
    sizes = [
        (len(text) * LABEL_POINTS * 0.6 * px_per_pt, LABEL_POINTS * 1.25 * px_per_pt) for *_, text in labels
    ]
    lifts = spread_labels([(float(a), float(b)) for a, b in anchors], sizes)
    for (x, y, text), lift in zip(labels, lifts, strict=True):
        offset = (4, 4 + lift / px_per_pt)
        ax.annotate(text, (x, y), textcoords="offset points", xytext=offset, fontsize=LABEL_POINTS)


def spread_labels(
    anchors: Sequence[tuple[float, float]], sizes: Sequence[tuple[float, float]]
) -> list[float]:
    """How far (pixels) to lift each label above its anchor so that no two label boxes overlap:
    greedy, lowest anchor first, each lifted by its height until it collides with none placed."""
    placed: list[tuple[float, float, float, float]] = []
    lifts = [0.0] * len(anchors)
    for i in sorted(range(len(anchors)), key=lambda j: (anchors[j][1], anchors[j][0])):
        (x, y), (w, h) = anchors[i], sizes[i]
        lift = 0.0
        while any(_overlap((x, y + lift, w, h), box) for box in placed):
            lift += h
        placed.append((x, y + lift, w, h))
        lifts[i] = lift
    return lifts


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


def _all_failed(row: dict[str, Any]) -> bool:
    """Every record of the setting failed (the backend or the run raised): no accuracy to show."""
    outcomes: dict[str, int] = row.get("outcomes") or {}
    return not any(count for name, count in outcomes.items() if name not in RETRIED_OUTCOMES)


def missing_settings(rows: Sequence[dict[str, Any]], runs: Sequence[Path] = ()) -> list[str]:
    """A line per setting with no point: all its records failed, or (from run.json) it recorded none."""
    notes = [
        f"not shown: {r['strategy']} n={r['n']}: every record failed ({_outcomes(r)})"
        for r in rows
        if _all_failed(r)
    ]
    seen = {(r["strategy"], r["n"]) for r in rows}
    for run in runs:
        for entry in _run_json(run).get("strategies") or []:
            if not isinstance(entry, dict) or (entry.get("name"), entry.get("n")) in seen:
                continue
            seen.add((entry.get("name"), entry.get("n")))
            notes.append(f"not shown: {entry.get('name')} n={entry.get('n')}: no records")
    return notes


def _outcomes(row: dict[str, Any]) -> str:
    return ", ".join(f"{count} {name}" for name, count in (row.get("outcomes") or {}).items()) or "none"


def plot_title(rows: Sequence[dict[str, Any]], runs: Sequence[Path] = ()) -> str:
    """``TASK · MODEL · DATE`` for the runs drawn (each part joined with ' vs ' where they differ)."""
    tasks = list(dict.fromkeys(str(r.get("task", "")) for r in rows if r.get("task")))
    infos = [(run, _run_json(run)) for run in runs]
    tasks = tasks or list(
        dict.fromkeys(str(_get(i, "settings", "task")) for _, i in infos if _get(i, "settings", "task"))
    )
    models = list(dict.fromkeys(_model(info) for _, info in infos))
    dates = list(dict.fromkeys(_date(run, info) for run, info in infos))
    parts = [" vs ".join(p) for p in (tasks, models, dates) if p]
    return " · ".join([*parts, "accuracy vs cost (95% bootstrap CI)"])


def _run_json(run: Path) -> dict[str, Any]:
    """run.json as a plain dict, ``{}`` where it is missing or unreadable (a title is no reason to fail)."""
    try:
        data = json.loads((run / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _get(data: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None  # type: ignore[assignment]
    return data


def _model(info: dict[str, Any]) -> str:
    """The model: a ``model`` field if the run has one, else the backend options', else the backend spec."""
    for value in (
        info.get("model"),
        _get(info, "settings", "backend_options", "model"),
        _get(info, "settings", "backend"),
    ):
        if isinstance(value, str) and value:
            return value
    return "unknown model"


def _date(run: Path, info: dict[str, Any]) -> str:
    """The run's start day (run.json ``started_at``), else the day the folder was last written."""
    started = info.get("started_at")
    if not isinstance(started, int | float):
        try:
            started = run.stat().st_mtime
        except OSError:
            return "unknown date"
    return time.strftime("%Y-%m-%d", time.localtime(started))
