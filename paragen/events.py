"""Events streamed out of a run, for progress displays and logs.

They are small pydantic models with a ``type`` tag so a JSONL log of them can be
read back with one ``TypeAdapter(Event)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import Field

from paragen.types import Model, StrategyResult, Trace


class SampleStarted(Model):
    type: Literal["sample_started"] = "sample_started"
    problem_id: str
    trace_id: int
    label: str
    t: float


class SampleEnded(Model):
    type: Literal["sample_ended"] = "sample_ended"
    problem_id: str
    trace: Trace


class Note(Model):
    """A strategy's own event: a decision worth seeing (a cluster formed, a round began)."""

    type: Literal["note"] = "note"
    problem_id: str
    t: float
    message: str
    data: dict[str, Any] = Field(default_factory=dict)


class WorkerText(Model):
    """New text of one worker that writes alongside others (Hogwild!), as it is written.

    ``text`` continues what the worker's earlier events said: a live view or a server appends it to
    the worker's column. It holds what the worker generated and text the strategy wrote into its turn
    (step headers, nudges), in the order the worker's cache holds them.
    """

    type: Literal["worker_text"] = "worker_text"
    problem_id: str
    trace_id: int
    worker: int
    name: str
    text: str
    t: float


class RunEnded(Model):
    type: Literal["run_ended"] = "run_ended"
    result: StrategyResult


Event = Annotated[SampleStarted | SampleEnded | Note | WorkerText | RunEnded, Field(discriminator="type")]
EventSink = Callable[[SampleStarted | SampleEnded | Note | WorkerText | RunEnded], None]
