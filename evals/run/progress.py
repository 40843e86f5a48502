"""A sweep's progress: rich's bars in a terminal, one plain line at a steady interval elsewhere.

A sweep logged to a file or a pipe would otherwise print nothing for minutes and then every bar at
once at its end; :class:`LineProgress` keeps rich's task accounting and writes, every ``interval``
seconds from a background thread, ``progress: DONE/TOTAL problems (P%), R/min, ETA Ts`` to stderr.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import IO, Any

from rich import get_console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

INTERVAL_ENV = "PARAGEN_PROGRESS_INTERVAL"
DEFAULT_INTERVAL_S = 30.0


class LineProgress(Progress):
    """rich's Progress without its display: a line on ``stream`` every ``interval`` seconds."""

    def __init__(self, interval: float, stream: IO[str] | None = None) -> None:
        super().__init__(disable=True)
        self.interval = interval
        self.stream = stream or sys.stderr
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="paragen-progress", daemon=True)
        self._begun = time.monotonic()
        self._resumed = 0.0  # problems recorded before this run started: not part of its rate

    def add_task(self, description: str, start: bool = True, total: float | None = 100.0,
                 completed: int = 0, visible: bool = True, **fields: Any) -> TaskID:  # fmt: skip
        self._resumed += completed
        return super().add_task(description, start, total, completed, visible, **fields)

    def start(self) -> None:
        self._begun = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()
            self.stream.write(self.line() + "\n")
            self.stream.flush()

    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            self.stream.write(self.line() + "\n")
            self.stream.flush()

    def line(self) -> str:
        """done/total of the combinations begun so far, the rate since the start and the ETA."""
        done = sum(t.completed for t in self.tasks)
        total = sum(t.total or 0 for t in self.tasks)
        elapsed = max(time.monotonic() - self._begun, 1e-9)
        rate = (done - self._resumed) / elapsed
        share = f" ({done / total:.0%})" if total else ""
        eta = f"ETA {(total - done) / rate:.0f}s" if rate > 0 else "ETA -"
        return f"progress: {done:.0f}/{total:.0f} problems{share}, {60 * rate:.1f}/min, {elapsed:.0f}s, {eta}"


def interval_s() -> float:
    """The line interval: ``PARAGEN_PROGRESS_INTERVAL`` seconds where set (a positive number), else 30."""
    try:
        value = float(os.environ.get(INTERVAL_ENV, DEFAULT_INTERVAL_S))
    except ValueError:
        return DEFAULT_INTERVAL_S
    return value if value > 0 else DEFAULT_INTERVAL_S


def sweep_progress(enabled: bool) -> Progress:
    """Bars in a terminal, lines elsewhere, nothing when disabled."""
    if enabled and not get_console().is_terminal:
        return LineProgress(interval_s())
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        disable=not enabled,
        transient=False,
    )
