"""Where each request's outputs go: a memory object stream owned by the caller's event loop.

The step thread hands a step's outputs over with one ``anyio.from_thread.run_sync`` call per event
loop, however many requests live there. A request whose event loop is gone is aborted.

A reader that stops reading stops its sequences: once ``STALL_STEPS`` steps' outputs wait unread
in a request's stream, its sequences sit out decode steps (``Sequence.stalled``, their cache kept)
until the reader takes them. A monitor that holds a sample (Parallel-Probe's round barrier, a
probe awaited mid-stream) so costs the engine a few steps, not a whole sample's worth.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from dataclasses import dataclass

import anyio
import anyio.from_thread
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from paragen.engine.llm_engine import LLMEngine, StepOutput
from paragen.engine.sequence import Sequence

Item = list[StepOutput] | BaseException
STALL_STEPS = 4  # unread steps that stall a request: a reader that keeps up is 0-1 behind


@dataclass(slots=True)
class Sink:
    """Where one request's outputs go: a memory stream owned by one event loop."""

    send: MemoryObjectSendStream[Item]
    token: anyio.lowlevel.EventLoopToken
    unread: int = 0  # items sent and not yet received (both ends run in the event loop's thread)

    def took_one(self) -> bool:
        """Count an item the reader took; True when that brought it back from a stall."""
        self.unread -= 1
        return self.unread == STALL_STEPS - 1


@dataclass(slots=True)
class Request:
    """The caller's side of a submitted request."""

    seq_ids: list[int]
    receive: MemoryObjectReceiveStream[Item]
    num_prompt_tokens: int
    sink: Sink

    def close(self) -> None:
        """Close both ends (event loop thread only; deliveries run there too, so this cannot race)."""
        self.sink.send.close()
        self.receive.close()


class Sinks:
    """The live sequences' sinks (the step thread's only)."""

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self._by_seq: dict[int, Sink] = {}

    def add(self, seqs: list[Sequence], sink: Sink) -> None:
        self._by_seq.update((seq.seq_id, sink) for seq in seqs)

    def discard(self, seq_id: int) -> None:
        self._by_seq.pop(seq_id, None)

    def mark_stalled(self) -> None:
        """Stall the sequences whose reader is ``STALL_STEPS`` behind, free the others (step thread)."""
        seqs = self.engine.seqs
        for seq_id, sink in self._by_seq.items():
            seq = seqs.get(seq_id)
            if seq is not None:
                seq.stalled = sink.unread >= STALL_STEPS

    def deliver_step(self, outputs: list[StepOutput]) -> None:
        """Each output to its sequence's sink; a finished sequence's sink is forgotten."""
        by_sink: dict[int, tuple[Sink, list[StepOutput]]] = {}
        for out in outputs:
            sink = self._by_seq.get(out.seq_id)
            if sink is None:
                continue
            by_sink.setdefault(id(sink), (sink, []))[1].append(out)
            if out.finish_reason is not None:
                del self._by_seq[out.seq_id]
        self.deliver([(sink, batch) for sink, batch in by_sink.values()])

    def fail_all(self, exc: BaseException) -> None:
        """Abort every live sequence and send ``exc`` to its request."""
        sinks = {id(s): s for s in self._by_seq.values()}
        for seq_id in list(self._by_seq):
            self.engine.abort(seq_id)
        self._by_seq.clear()
        self.deliver([(sink, exc) for sink in sinks.values()])

    def deliver(self, items: list[tuple[Sink, Item]]) -> None:
        # One hop into each event loop per step, however many requests live there.
        per_loop: dict[anyio.lowlevel.EventLoopToken, list[tuple[Sink, Item]]] = defaultdict(list)
        for sink, item in items:
            per_loop[sink.token].append((sink, item))
        for token, batch in per_loop.items():
            try:
                anyio.from_thread.run_sync(_put_all, batch, token=token)
            except Exception:
                for sink, _ in batch:
                    self._drop(sink)

    def _drop(self, sink: Sink) -> None:
        for seq_id in [i for i, s in self._by_seq.items() if s is sink]:
            self.engine.abort(seq_id)
            del self._by_seq[seq_id]


def _put_all(batch: list[tuple[Sink, Item]]) -> None:
    for sink, item in batch:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            sink.send.send_nowait(item)  # a closed stream: the reader left and its abort is on the way
            sink.unread += 1
