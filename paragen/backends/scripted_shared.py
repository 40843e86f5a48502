"""A shared-cache backend without a model, for fast tests of Hogwild!-style strategies.

Tokens are words (as in the scripted backend); each worker's next word comes from a
:data:`SharedResponder` that sees the text of the worker's view, so tests can script workers that
react to each other, or plain per-worker scripts. The session checks what the engine's contract
asks (rows write to distinct, live segments; at least one input token per row) and records every
forward pass and segment, so tests can read the views a strategy built.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio

from paragen.backends.base import Capabilities, SharedRow, SharedSample
from paragen.backends.scripted import Responder, Script, ScriptedBackend
from paragen.types import SamplingParams

EOS = "<eos>"
_PIECE = re.compile(r"\n\n|\s*\S+|\s+")  # words with their leading space; a blank line on its own


def tokenize(text: str) -> list[str]:
    """Word pieces as the scripted backend cuts them, except that a blank line is a piece of its own."""
    return _PIECE.findall(text)


SharedResponder = Callable[[int, str], str]
"""Called with (worker, text of the row's view including this pass's input); returns the next word.

It is called once per token a worker keeps: a row that does not start with the worker's previous
sample (a prefill, whose sample is dropped) gets that sample again without a call.
"""


@dataclass(slots=True)
class ForwardRecord:
    rows: list[SharedRow]
    suppress: frozenset[int]
    greedy: bool
    views: list[str] = field(default_factory=list)  # each row's view as text, after the writes


class ScriptedSharedSession:
    """The :class:`~paragen.backends.base.SharedSession` contract over word tokens."""

    def __init__(
        self,
        responder: SharedResponder,
        *,
        finisher: str = "",
        filler: str = " more",
        forward_delay: float = 0.0,
    ) -> None:
        self._responder = responder
        self._finisher = tokenize(finisher)
        self._filler = filler
        self.forward_delay = forward_delay
        self.pieces: list[str] = [EOS]
        self._ids: dict[str, int] = {EOS: 0}
        self.eos_token_ids = frozenset({0})
        self.max_view_tokens = 1 << 20
        self.num_reused_tokens = 0  # no cache to share
        self.segments: dict[int, list[int]] = {}
        self.freed: list[int] = []
        self.forwards: list[ForwardRecord] = []
        self._next_segment = 0
        self._last: dict[int, int] = {}  # each worker's latest sample

    # -- text ------------------------------------------------------------------------------------

    def _id(self, piece: str) -> int:
        if piece not in self._ids:
            self._ids[piece] = len(self.pieces)
            self.pieces.append(piece)
        return self._ids[piece]

    def tokenize(self, text: str) -> list[int]:
        return [self._id(p) for p in tokenize(text)]

    def detokenize(self, token_ids: Sequence[int]) -> str:
        return "".join(self.pieces[i] for i in token_ids if i not in self.eos_token_ids)

    def apply_chat_template(self, messages: Sequence[dict[str, str]]) -> str:
        turns = "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages)
        return f"{turns}<|assistant|>\n"

    def segment_text(self, segment: int) -> str:
        return self.detokenize(self.segments[segment])

    def view_text(self, view: Sequence[int]) -> str:
        return "".join(self.segment_text(s) for s in view)

    # -- the contract ----------------------------------------------------------------------------

    def segment_length(self, segment: int) -> int:
        return len(self.segments[segment])

    async def new_segment(self) -> int:
        segment = self._next_segment
        self._next_segment += 1
        self.segments[segment] = []
        return segment

    async def new_segments(self, count: int) -> list[int]:
        return [await self.new_segment() for _ in range(count)]

    async def free_segment(self, segment: int) -> None:
        del self.segments[segment]
        self.freed.append(segment)

    async def append_from(self, dst: int, src: int, *, clear: bool = False) -> None:
        assert dst != src and dst in self.segments and src in self.segments, f"append_from({dst}, {src})"
        self.segments[dst].extend(self.segments[src])
        if clear:
            self.segments[src] = []

    async def forward(
        self, rows: Sequence[SharedRow], *, suppress_token_ids: Sequence[int] = (), greedy: bool = False
    ) -> list[SharedSample]:
        targets = [row.view[-1] for row in rows]
        assert len(set(targets)) == len(targets), f"rows write to the same segment: {targets}"
        for row in rows:
            assert row.token_ids, "a row needs at least one input token"
            missing = [s for s in row.view if s not in self.segments]
            assert not missing, f"view {list(row.view)} names freed or unknown segments {missing}"
        for row in rows:  # every write before any read, as the engine does layer by layer
            self.segments[row.view[-1]].extend(row.token_ids)
        record = ForwardRecord(list(rows), frozenset(suppress_token_ids), greedy)
        record.views = [self.view_text(row.view) for row in rows]
        self.forwards.append(record)
        if self.forward_delay:
            await anyio.sleep(self.forward_delay)
        else:
            await anyio.lowlevel.checkpoint()
        return [self._sample(row, text, record) for row, text in zip(rows, record.views, strict=True)]

    def _sample(self, row: SharedRow, view_text: str, record: ForwardRecord) -> SharedSample:
        last = self._last.get(row.worker)
        if record.greedy and self._finisher:
            token = self._id(self._finisher.pop(0))
        elif last is not None and row.token_ids[0] != last:
            token = last  # the previous sample was dropped (a prefill): the same one again
        else:
            token = self._id(self._responder(row.worker, view_text))
        if token in record.suppress:
            token = self._id(self._filler)
        self._last[row.worker] = token
        return SharedSample(token_id=token, logprob=-0.5)


def script_responder(scripts: Sequence[str]) -> SharedResponder:
    """Worker w says ``scripts[w]`` word by word, then the end-of-sequence token forever."""
    queues = [tokenize(text) for text in scripts]

    def respond(worker: int, _view: str) -> str:
        queue = queues[worker]
        return queue.pop(0) if queue else EOS

    return respond


class ScriptedSharedBackend(ScriptedBackend):
    """The scripted backend plus ``shared_session``; each session is built by ``make_session``."""

    name = "scripted_shared"

    def __init__(
        self,
        make_session: Callable[[], ScriptedSharedSession],
        responder: Responder | Sequence[Script | str] | None = None,
    ) -> None:
        caps = Capabilities(shared_cache=True, continue_final=True, logprobs=True)
        super().__init__(responder, capabilities=caps)
        self._make_session = make_session
        self.sessions: list[ScriptedSharedSession] = []
        self.session_params: list[tuple[SamplingParams, int]] = []

    @classmethod
    def from_spec(cls, target: str | None = None, **options: Any) -> ScriptedSharedBackend:
        """Workers that each say a fixed text and one of them boxes 4 (a model-free demo)."""
        scripts = [
            "I will add the numbers. 2 + 2 = 4, so the answer is \\boxed{4}.\n\nDone.",
            "I will check Alice's sum. Two plus two is four.\n\nAgreed.",
        ]
        return cls(lambda: ScriptedSharedSession(script_responder(scripts * 4), forward_delay=0.05))

    @asynccontextmanager
    async def shared_session(
        self, params: SamplingParams, *, num_workers: int
    ) -> AsyncIterator[ScriptedSharedSession]:
        session = self._make_session()
        self.sessions.append(session)
        self.session_params.append((params, num_workers))
        try:
            yield session
        finally:
            with anyio.CancelScope(shield=True):
                for segment in list(session.segments):
                    await session.free_segment(segment)


__all__ = [
    "EOS",
    "ForwardRecord",
    "ScriptedSharedBackend",
    "ScriptedSharedSession",
    "SharedResponder",
    "script_responder",
    "tokenize",
]
