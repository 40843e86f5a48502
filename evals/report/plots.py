"""Pareto plots: accuracy against latency, total tokens and sequential tokens (and, for runs of a
reasoning model, thinking tokens).

One point per strategy/n with its 95% CI as an error bar (runs side by side: one marker
per run), and the Pareto frontier (no other point is both cheaper and more accurate)
drawn as a step line. Matplotlib runs on the Agg backend, so no display is needed; the PNG
goes beside the records.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evals.analysis.metrics import Point, pareto_front
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


def plot_pareto(rows: Sequence[dict[str, Any]], path: Path, *, title: str = "") -> Path:
    """Draw the panels for the live summary rows and save them as ``path`` (PNG): three, and a fourth
    of thinking tokens where some row's samples thought."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    panels = (*AXES, THINKING_AXIS) if any(r.get("reasoning_tokens") for r in rows) else AXES
    strategies = sorted({r["strategy"] for r in rows})
    legend_rows = -(-(len(strategies) + 2) // 8)  # the legend's rows at 8 entries a row
    size = (6 * len(panels), 4.4 + 0.3 * legend_rows)
    fig, axes = plt.subplots(1, len(panels), figsize=size, squeeze=False)
    colors = {name: plt.get_cmap("tab20")(i % 20) for i, name in enumerate(strategies)}
    folders = list(dict.fromkeys(r.get("folder", "") for r in rows))
    markers = {name: MARKERS[i % len(MARKERS)] for i, name in enumerate(folders)}
    for ax, (key, label) in zip(axes[0], panels, strict=True):
        _panel(ax, rows, key, label, (colors, markers))
    handles = [Line2D([], [], marker="o", linestyle="", color=colors[s], label=s) for s in strategies]
    if len(folders) > 1:  # runs side by side: one marker per run
        handles += [Line2D([], [], marker=markers[f], linestyle="", color="gray", label=f) for f in folders]
    handles.append(Line2D([], [], color="black", linestyle="--", label="Pareto frontier"))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 8), frameon=False)
    fig.suptitle(title or "accuracy vs cost (95% bootstrap CI)")
    fig.tight_layout(rect=(0, 0.02 + 0.3 * legend_rows / fig.get_figheight(), 1, 0.95))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def _panel(
    ax: Any,
    rows: Sequence[dict[str, Any]],
    key: str,
    label: str,
    style: tuple[dict[str, Any], dict[str, str]],
) -> None:
    """One cost axis: every setting with its CI, and the Pareto frontier over all of them (all runs)."""
    colors, markers = style
    points = []
    for row in rows:
        x = float(row[key])
        if math.isnan(x):
            continue
        acc = float(row["accuracy"])
        err = [[max(0.0, acc - row["ci_low"])], [max(0.0, row["ci_high"] - acc)]]
        marker = markers[row.get("folder", "")]
        ax.errorbar(x, acc, yerr=err, fmt=marker, color=colors[row["strategy"]], capsize=3)
        ax.annotate(f"n={row['n']}", (x, acc), textcoords="offset points", xytext=(4, 4), fontsize=7)
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
