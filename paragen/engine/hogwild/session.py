"""A Hogwild! shared session in the engine: views of segments, and the rows of its forward passes.

A segment (``segments.py``) is an ordered list of the engine's ref-counted blocks holding a run of
tokens whose keys are stored rotated at positions of its own; a view is an ordered list of
segments. Each forward writes every row's new tokens into the last segment of its view (all
writes of a layer happen before any read, so rows see each other's tokens in the same pass) and
attends each row's queries over its view (``forward.py``). A segment joins any number of views
without a copy. Everything here runs on the engine's step thread (see async_engine); several
sessions' rows share one forward through ``batch.py``.
"""

from __future__ import annotations

import itertools
import secrets
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from paragen.engine.hogwild.forward import Draw, Placed, model_logits, sample_rows
from paragen.engine.hogwild.reads import RowView, shift_tables
from paragen.engine.hogwild.segments import Segments
from paragen.engine.llm_engine import LLMEngine
from paragen.engine.sampler import sample_seed
from paragen.errors import EngineError
from paragen.types import SamplingParams, SharedRow, SharedSample


class EngineSharedSession:
    """The engine's side of a shared session: its segments (every block freed by ``close``), its
    workers' sampler streams, and the rows of its passes."""

    def __init__(self, engine: LLMEngine, params: SamplingParams, num_workers: int):
        if num_workers < 1:
            raise EngineError(f"a shared session needs at least one worker, got {num_workers}")
        self.engine = engine
        self.params = params
        self.num_workers = num_workers
        self.segments = Segments(engine)
        base = secrets.randbits(31) if params.seed is None else params.seed
        # Worker w draws like sample w of a plain request with the same seed.
        self.seeds = [sample_seed(base, w) for w in range(num_workers)]
        self.steps = [0] * num_workers  # tokens each worker has sampled (the sampler's counter)
        self.num_reused_tokens = 0  # prompt tokens taken from other sessions' blocks, not computed
        self.is_closed = False

    def new_segment(self) -> int:
        self._check_open()
        return self.segments.new()

    def free_segment(self, seg: int) -> None:
        self._check_open()
        self.segments.free(seg)

    def clear_segment(self, seg: int) -> None:
        """Empty the segment: its blocks freed, the id kept (the next write places it anew)."""
        self._check_open()
        self.segments.empty(seg)

    def close(self) -> None:
        """Free every segment's blocks (idempotent)."""
        self.segments.close()
        self.is_closed = True

    def length(self, seg: int) -> int:
        return self.segments[seg].length

    def base(self, seg: int) -> int | None:
        """Where the segment's first key is stored rotated (None while it is empty)."""
        return self.segments[seg].base

    def slots(self, seg: int) -> array[int]:
        """The cache slot of each of the segment's tokens, in order."""
        segment = self.segments[seg]
        return segment.slots[: segment.length]

    @torch.inference_mode()
    def append_from(self, dst: int, src: int) -> None:
        """Copy ``src``'s tokens onto the end of ``dst``: values as they are, keys rotated to their new place.

        Folding every finished step into one history segment keeps a view at a few segments however
        long the run (the reference's ``append_from``); ``src`` stays as it was.
        """
        self._check_open()
        to, source = self.segments[dst], self.segments[src]
        if dst == src:
            raise EngineError(f"cannot append segment {src} to itself")
        if source.base is None:
            return  # nothing written yet
        if to.base is None:
            to.base = source.base
        at, n = to.base + to.length, source.length
        if at + n > self.engine.cfg.max_position_embeddings:
            raise EngineError(f"segment {dst} would end past the model's positions")
        self.segments.grow({dst: to.length + n})
        runner, model = self.engine.runner, self.engine.model
        cos, sin = shift_tables((model.cos, model.sin), runner.tensor([at - source.base]))
        src_slots, dst_slots = list(self.slots(src)), list(to.slots[to.length : to.length + n])
        self.engine.cache.copy_slots(runner.tensor(src_slots), runner.tensor(dst_slots), cos, sin)
        to.length += n

    @torch.inference_mode()
    def forward(
        self, rows: Sequence[SharedRow], suppress_token_ids: Sequence[int] = (), greedy: bool = False
    ) -> list[SharedSample]:
        """One forward pass: every row's tokens written, every row's next token sampled (row order).

        This session's pass alone: ``batch.forward_together`` runs several sessions' in one forward.
        """
        logits = self.logits(rows)
        if suppress_token_ids:
            logits[:, list(suppress_token_ids)] = float("-inf")
        draws = self.draws(rows, greedy)
        return [SharedSample(t, lp) for t, lp in sample_rows(self.engine.runner, logits, draws)]

    @torch.inference_mode()
    def logits(self, rows: Sequence[SharedRow]) -> torch.Tensor:
        """One forward pass: every row's tokens written; the logits [rows, vocab] at each row's last token."""
        prepared = self.prepare(rows)
        try:
            logits = model_logits(self.engine, [self.place(row, prepared.lengths) for row in prepared.rows])
        except Exception:
            self.abandon(prepared)
            raise
        self.commit(prepared)
        return logits

    def draws(self, rows: Sequence[SharedRow], greedy: bool) -> list[Draw]:
        """How each row samples (its worker's seed and step, this session's settings); the steps advance."""
        draws = [Draw(self.params, self.seeds[row.worker], self.steps[row.worker], greedy) for row in rows]
        for row in rows:
            self.steps[row.worker] += 1
        return draws

    def prepare(self, rows: Sequence[SharedRow]) -> Prepared:
        """Checks the rows and grows their target segments: the rows as they run, each target's length after.

        A row that starts a session's first segment (a view of that segment alone, still empty) takes
        the whole blocks a live session's first segment shares with it (``PromptHeads``) and feeds
        only the rest of its tokens; its own blocks are offered at once, so a session prepared later
        for the same pass takes them too (its row reads them after this pass writes them: every row
        writes before any row reads). A pass that fails after this is ``abandon``-ed.
        """
        self._check_open()
        firsts: list[tuple[int, list[int]]] = []
        run: list[SharedRow] = []
        for row in rows:  # one at a time: a second row into a segment just taken is no first (and refused)
            if self._starts_alone(row):
                firsts.append((row.view[-1], list(row.token_ids)))
                taken = self.segments.take_head(row.view[0], list(row.token_ids))
                row = SharedRow(row.worker, row.view, row.token_ids[taken:]) if taken else row
            run.append(row)
        try:
            new_lengths = self._check_rows(run)
            self.segments.grow(new_lengths)
        except EngineError:
            for seg, _ in firsts:  # nothing was written: the segment is empty again
                self.segments.empty(seg)
            raise
        for row in run:  # every base before any row is placed: a peer's row may read this segment
            own = self.segments[row.view[-1]]
            if own.base is None:  # written first here: its keys go where they sit in this view
                own.base = sum(self.segments.lengths(row.view[:-1], new_lengths))
        for seg, token_ids in firsts:
            self.segments.offer_head(seg, token_ids)
        reused = sum(len(row.token_ids) - len(r.token_ids) for row, r in zip(rows, run, strict=True))
        return Prepared(run, new_lengths, firsts, reused)

    def commit(self, prepared: Prepared) -> None:
        for seg, length in prepared.lengths.items():
            self.segments[seg].length = length
        self.num_reused_tokens += prepared.reused

    def abandon(self, prepared: Prepared) -> None:
        """The pass after ``prepare`` failed: its first segments are empty again and offered no more."""
        for seg, _ in prepared.firsts:
            self.segments.empty(seg)

    def place(self, row: SharedRow, new_lengths: dict[int, int]) -> Placed:
        """Where one row's tokens go (stored positions, cache slots) and what they attend."""
        lengths = self.segments.lengths(row.view, new_lengths)
        offsets = list(itertools.accumulate(lengths[:-1], initial=0))
        own = self.segments[row.view[-1]]
        assert own.base is not None  # set by prepare
        local = range(own.length, own.length + len(row.token_ids))
        segments = [self.segments[s] for s in row.view]
        view = RowView(
            slots=[seg.slots[:n] for seg, n in zip(segments, lengths, strict=True)],
            # an empty segment has no base yet, and no keys to shift
            shifts=[0 if g.base is None else o - g.base for g, o in zip(segments, offsets, strict=True)],
            num_new=len(row.token_ids),
            query_from=offsets[-1] + own.length,
        )
        slots = own.slots[own.length : local.stop]
        return Placed(list(row.token_ids), [own.base + p for p in local], slots, view)

    def _starts_alone(self, row: SharedRow) -> bool:
        return len(row.view) == 1 and row.view[0] in self.segments and not self.segments[row.view[0]].blocks

    def _check_open(self) -> None:
        if self.is_closed:
            raise EngineError("the shared session is closed")

    def _check_rows(self, rows: Sequence[SharedRow]) -> dict[int, int]:
        """Each target segment's length after this forward; raises on a malformed row."""
        if not rows:
            raise EngineError("a shared forward needs at least one row")
        new_lengths: dict[int, int] = {}
        for row in rows:
            if not 0 <= row.worker < self.num_workers:
                raise EngineError(f"worker {row.worker} is not in 0..{self.num_workers - 1}")
            if not row.view or len(set(row.view)) != len(row.view):
                raise EngineError(f"a view must list distinct segments, got {list(row.view)}")
            if not row.token_ids:
                raise EngineError("a row must feed at least one token")
            target = row.view[-1]
            if target in new_lengths:
                raise EngineError(f"two rows write to segment {target}")
            new_lengths[target] = self.segments[target].length + len(row.token_ids)
        max_len = self.engine.cfg.max_position_embeddings
        for row in rows:
            total = sum(self.segments.lengths(row.view, new_lengths))
            if total > max_len:
                raise EngineError(f"a view of {total} tokens exceeds the model's {max_len} positions")
        return new_lengths


@dataclass(frozen=True, slots=True)
class Prepared:
    """A session's rows checked for a pass: as they run, each target's length after, first prefills."""

    rows: list[SharedRow]
    lengths: dict[int, int]
    firsts: list[tuple[int, list[int]]]  # (segment, every token id its row brought): kept as a head
    reused: int  # tokens the rows took from other sessions' blocks instead of feeding them
