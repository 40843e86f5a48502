"""A live terminal view of workers writing side by side (Hogwild!): one column per worker.

It listens to a run's events and shows each :class:`~paragen.events.WorkerText` in its worker's
column as it comes, so a reader can watch the workers react to each other. It starts on the first
such event (runs of other strategies never show it) and redraws at most ``fps`` times a second,
from the event callback itself: no thread of its own. On a terminal the columns show the latest
lines of each worker; elsewhere (a pipe, a file) rich prints the last frame once when it stops.
"""

from __future__ import annotations

import textwrap
import time
from types import TracebackType
from typing import Any

from rich.console import Console, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from paragen.events import WorkerText


class WorkerColumns:
    """Event sink for ``Orchestrator(on_event=...)``; use it as a context manager around the run."""

    def __init__(self, console: Console | None = None, *, enabled: bool = True, fps: float = 10.0) -> None:
        self.console = console or Console()
        self.enabled = enabled
        self.names: dict[int, str] = {}
        self.texts: dict[int, str] = {}
        self._live: Live | None = None
        self._min_gap = 1.0 / fps
        self._last_draw = 0.0

    def on_event(self, event: Any) -> None:
        if not self.enabled or not isinstance(event, WorkerText):
            return
        self.names[event.worker] = event.name
        self.texts[event.worker] = self.texts.get(event.worker, "") + event.text
        if self._live is None:
            self._live = Live(self.render(), console=self.console, auto_refresh=False)
            self._live.start()
        now = time.monotonic()
        if now - self._last_draw >= self._min_gap:
            self._last_draw = now
            self._live.update(self.render(), refresh=True)

    def render(self) -> RenderableType:
        """One column per worker, each showing the last lines that fit the terminal."""
        workers = sorted(self.texts)
        table = Table(expand=True, show_lines=False)
        width = max(10, self.console.width // max(1, len(workers)) - 4)
        rows = max(4, self.console.height - 8)
        for worker in workers:
            table.add_column(self.names[worker], ratio=1, overflow="fold")
        table.add_row(*(Text(_tail(self.texts[w], width, rows)) for w in workers))
        return table

    def __enter__(self) -> WorkerColumns:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._live is not None:
            self._live.update(self.render(), refresh=True)
            self._live.stop()
            self._live = None


def _tail(text: str, width: int, rows: int) -> str:
    """The last ``rows`` lines of ``text`` wrapped at ``width`` (blank lines kept: they end steps)."""
    lines: list[str] = []
    for paragraph in text.split("\n"):
        lines.extend(textwrap.wrap(paragraph, width) or [""])
    return "\n".join(lines[-rows:])


__all__ = ["WorkerColumns"]
