"""Hogwild! shared-cache sessions: segments of blocks, views of segments, one forward for all rows.

A segment is an ordered list of the engine's ref-counted blocks holding a run of tokens whose
keys are stored rotated at segment-local positions 0..len-1; a view is an ordered list of
segments. Each forward writes every row's new tokens into the last segment of its view (all
writes of a layer happen before any read, so rows see each other's tokens in the same pass) and
attends each row's queries over its view (``shared_attention.py``). A segment joins any number
of views without a copy. Everything here runs on the engine's step thread (see async_engine).
"""

from __future__ import annotations

import itertools
import secrets
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from paragen.engine.hogwild.forward import Draw, Placed, model_logits, sample_rows
from paragen.engine.hogwild.groups import RowPlan, shift_tables
from paragen.engine.hogwild.types import SharedRow, SharedSample
from paragen.engine.llm_engine import LLMEngine, sample_seed
from paragen.errors import EngineError
from paragen.types import SamplingParams


@dataclass(slots=True)
class Segment:
    blocks: list[int] = field(default_factory=list)
    length: int = 0
    base: int | None = None  # keys stored rotated at base + j; set by the first write (its offset)
    # the cache slot of each token (maybe a few more), int32: the fused plan copies them as memory
    slots: array[int] = field(default_factory=lambda: array("i"))


class SharedCache:
    """The segments of one session over the engine's block pool; every block is freed by ``close``."""

    def __init__(self, engine: LLMEngine, params: SamplingParams, num_workers: int):
        if num_workers < 1:
            raise EngineError(f"a shared session needs at least one worker, got {num_workers}")
        self.engine = engine
        self.params = params
        self.num_workers = num_workers
        self.segments: dict[int, Segment] = {}
        self._ids = itertools.count()
        base = secrets.randbits(31) if params.seed is None else params.seed
        # Worker w draws like sample w of a plain request with the same seed.
        self.seeds = [sample_seed(base, w) for w in range(num_workers)]
        self.steps = [0] * num_workers  # tokens each worker has sampled (the sampler's counter)
        self.num_reused_tokens = 0  # prompt tokens taken from other sessions' blocks, not computed
        self.is_closed = False

    def new_segment(self) -> int:
        self._check_open()
        seg = next(self._ids)
        self.segments[seg] = Segment()
        return seg

    def free_segment(self, seg: int) -> None:
        self._release(seg)
        del self.segments[seg]

    def clear_segment(self, seg: int) -> None:
        """Empty the segment: its blocks freed, the id kept (the next write places it anew)."""
        self._release(seg)
        self.segments[seg] = Segment()

    def _release(self, seg: int) -> None:
        self._check_open()
        self.engine.prompt_heads.drop((id(self), seg))
        self.engine.blocks.release(self._segment(seg).blocks)

    def close(self) -> None:
        """Free every segment's blocks (idempotent)."""
        for seg, segment in self.segments.items():
            self.engine.prompt_heads.drop((id(self), seg))
            self.engine.blocks.release(segment.blocks)
        self.segments.clear()
        self.is_closed = True

    def length(self, seg: int) -> int:
        return self._segment(seg).length

    def base(self, seg: int) -> int | None:
        """Where the segment's first key is stored rotated (None while it is empty)."""
        return self._segment(seg).base

    def slots(self, seg: int) -> array[int]:
        """The cache slot of each of the segment's tokens, in order."""
        segment = self._segment(seg)
        return segment.slots[: segment.length]

    @torch.inference_mode()
    def append_from(self, dst: int, src: int) -> None:
        """Copy ``src``'s tokens onto the end of ``dst``: values as they are, keys rotated to their new place.

        Folding every finished step into one history segment keeps a view at a few segments however
        long the run (the reference's ``append_from``); ``src`` stays as it was.
        """
        self._check_open()
        to, source = self._segment(dst), self._segment(src)
        if dst == src:
            raise EngineError(f"cannot append segment {src} to itself")
        if source.base is None:
            return  # nothing written yet
        if to.base is None:
            to.base = source.base
        at, n = to.base + to.length, source.length
        if at + n > self.engine.cfg.max_position_embeddings:
            raise EngineError(f"segment {dst} would end past the model's positions")
        self._grow({dst: to.length + n})
        runner, model = self.engine.runner, self.engine.model
        cos, sin = shift_tables((model.cos, model.sin), runner.tensor([at - source.base]))
        src_slots, dst_slots = list(self.slots(src)), list(to.slots[to.length : to.length + n])
        self.engine.cache.copy_slots(runner.tensor(src_slots), runner.tensor(dst_slots), cos, sin)
        to.length += n

    @torch.inference_mode()
    def forward(
        self, rows: Sequence[SharedRow], suppress_token_ids: Sequence[int] = (), greedy: bool = False
    ) -> list[SharedSample]:
        """One forward pass: every row's tokens written, every row's next token sampled (row order)."""
        (outcome,) = forward_together([SharedForward(self, rows, tuple(suppress_token_ids), greedy)])
        if isinstance(outcome, EngineError):
            raise outcome
        return outcome

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
                row = self._take_head(row)
            run.append(row)
        try:
            new_lengths = self._check_rows(run)
            self._grow(new_lengths)
        except EngineError:
            for seg, _ in firsts:  # nothing was written: the segment is empty again
                self.engine.blocks.release(self.segments[seg].blocks)
                self.segments[seg] = Segment()
            raise
        for row in run:  # every base before any row is placed: a peer's row may read this segment
            own = self.segments[row.view[-1]]
            if own.base is None:  # written first here: its keys go where they sit in this view
                own.base = sum(new_lengths.get(s, self.segments[s].length) for s in row.view[:-1])
        for seg, token_ids in firsts:
            self.engine.prompt_heads.keep((id(self), seg), token_ids, self.segments[seg].blocks)
        reused = sum(len(row.token_ids) - len(r.token_ids) for row, r in zip(rows, run, strict=True))
        return Prepared(run, new_lengths, firsts, reused)

    def commit(self, prepared: Prepared) -> None:
        for seg, length in prepared.lengths.items():
            self.segments[seg].length = length
        self.num_reused_tokens += prepared.reused

    def abandon(self, prepared: Prepared) -> None:
        """The pass after ``prepare`` failed: its first segments are empty again and offered no more."""
        for seg, _ in prepared.firsts:
            self.engine.prompt_heads.drop((id(self), seg))
            self.engine.blocks.release(self.segments[seg].blocks)
            self.segments[seg] = Segment()

    def _starts_alone(self, row: SharedRow) -> bool:
        return len(row.view) == 1 and row.view[0] in self.segments and not self.segments[row.view[0]].blocks

    def _take_head(self, row: SharedRow) -> SharedRow:
        """The row after its first segment took the blocks it shares with a live session's, if any."""
        blocks = self.engine.prompt_heads.match(list(row.token_ids))
        if not blocks:
            return row
        segment, bs = self.segments[row.view[0]], self.engine.blocks.block_size
        segment.blocks = self.engine.blocks.share(blocks)
        segment.length = len(blocks) * bs
        segment.slots = array("i", (block * bs + p for block in blocks for p in range(bs)))
        segment.base = 0
        return SharedRow(row.worker, row.view, row.token_ids[segment.length :])

    def _check_open(self) -> None:
        if self.is_closed:
            raise EngineError("the shared session is closed")

    def _segment(self, seg: int) -> Segment:
        if seg not in self.segments:
            raise EngineError(f"no segment {seg} in this session")
        return self.segments[seg]

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
            new_lengths[target] = self._segment(target).length + len(row.token_ids)
        max_len = self.engine.cfg.max_position_embeddings
        for row in rows:
            total = sum(new_lengths.get(s, self._segment(s).length) for s in row.view)
            if total > max_len:
                raise EngineError(f"a view of {total} tokens exceeds the model's {max_len} positions")
        return new_lengths

    def _grow(self, new_lengths: dict[int, int]) -> None:
        blocks = self.engine.blocks
        wanted = {s: blocks.num_blocks_for(n) - len(self.segments[s].blocks) for s, n in new_lengths.items()}
        if not blocks.can_allocate(sum(wanted.values())):
            raise EngineError(
                f"the KV cache is full: this forward needs {sum(wanted.values())} more blocks, "
                f"{blocks.num_free_blocks} are free",
                hint="raise kv_cache_mb or free segments",
            )
        bs = blocks.block_size
        for seg, n in wanted.items():
            segment = self.segments[seg]
            segment.blocks += blocks.allocate(n) if n > 0 else []
            have = len(segment.slots)  # a failed pass may have listed some already
            segment.slots.extend(segment.blocks[p // bs] * bs + p % bs for p in range(have, new_lengths[seg]))

    def place(self, row: SharedRow, new_lengths: dict[int, int]) -> Placed:
        """Where one row's tokens go (stored positions, cache slots) and what they attend."""
        lengths = [new_lengths.get(s, self.segments[s].length) for s in row.view]
        offsets = list(itertools.accumulate(lengths[:-1], initial=0))
        own = self.segments[row.view[-1]]
        assert own.base is not None  # set by prepare
        local = range(own.length, own.length + len(row.token_ids))
        segments = [self.segments[s] for s in row.view]
        plan = RowPlan(
            slots=[seg.slots[:n] for seg, n in zip(segments, lengths, strict=True)],
            # an empty segment has no base yet, and no keys to shift
            shifts=[0 if g.base is None else o - g.base for g, o in zip(segments, offsets, strict=True)],
            num_new=len(row.token_ids),
            query_from=offsets[-1] + own.length,
        )
        slots = own.slots[own.length : local.stop]
        return Placed(list(row.token_ids), [own.base + p for p in local], slots, plan)


@dataclass(frozen=True, slots=True)
class Prepared:
    """A session's rows checked for a pass: as they run, each target's length after, first prefills."""

    rows: list[SharedRow]
    lengths: dict[int, int]
    firsts: list[tuple[int, list[int]]]  # (segment, every token id its row brought): kept as a head
    reused: int  # tokens the rows took from other sessions' blocks instead of feeding them


@dataclass(frozen=True, slots=True)
class SharedForward:
    """One session's rows for a forward pass (``forward_together`` runs several sessions' at once)."""

    cache: SharedCache
    rows: Sequence[SharedRow]
    suppress_token_ids: tuple[int, ...] = ()
    greedy: bool = False


@torch.inference_mode()
def forward_together(jobs: Sequence[SharedForward]) -> list[list[SharedSample] | EngineError]:
    """One forward pass over the rows of several sessions of one engine; each job's samples or error.

    Sessions never see each other's tokens (a row attends only its own view), so merging them
    changes nothing but the batch: concurrent Hogwild! runs cost one pass per step, not one each.
    A job whose rows are malformed, or whose segments do not fit in the cache, fails alone. Two
    jobs of one session (tasks of one strategy forwarding at once) run in order, in two passes.
    """
    outcomes: dict[int, list[SharedSample] | EngineError] = {}
    pending = list(range(len(jobs)))
    while pending:
        now: dict[int, int] = {}  # session -> its first pending job
        for i in pending:
            now.setdefault(id(jobs[i].cache), i)
        chosen = list(now.values())  # in job order, as pending is
        outcomes.update(zip(chosen, _forward_once([jobs[i] for i in chosen]), strict=True))
        pending = [i for i in pending if i not in outcomes]
    return [outcomes[i] for i in range(len(jobs))]


def _forward_once(jobs: Sequence[SharedForward]) -> list[list[SharedSample] | EngineError]:
    """``forward_together`` for jobs of distinct sessions: one model forward."""
    outcomes: dict[int, list[SharedSample] | EngineError] = {}
    ready: list[tuple[int, Prepared]] = []
    for i, job in enumerate(jobs):
        try:
            ready.append((i, job.cache.prepare(job.rows)))
        except EngineError as exc:
            outcomes[i] = exc
    if not ready:
        return [outcomes[i] for i in range(len(jobs))]
    engine = jobs[ready[0][0]].cache.engine
    try:
        placed = [jobs[i].cache.place(row, prep.lengths) for i, prep in ready for row in prep.rows]
        logits = model_logits(engine, placed)
    except Exception:  # nothing was written for sure: no session keeps or offers a first segment of it
        for i, prepared in ready:
            jobs[i].cache.abandon(prepared)
        raise
    start = 0
    for i, prepared in ready:
        job = jobs[i]
        job.cache.commit(prepared)
        if job.suppress_token_ids:
            logits[start : start + len(job.rows), list(job.suppress_token_ids)] = float("-inf")
        start += len(job.rows)
    samples = _sample([jobs[i] for i, _ in ready], logits)
    start = 0
    for i, _ in ready:
        outcomes[i] = samples[start : start + len(jobs[i].rows)]
        start += len(jobs[i].rows)
    return [outcomes[i] for i in range(len(jobs))]


def _sample(jobs: Sequence[SharedForward], logits: torch.Tensor) -> list[SharedSample]:
    """Each row's next token with its own session's settings, seed and step (rows in job order)."""
    rows = [(job, row) for job in jobs for row in job.rows]
    draws = [
        Draw(job.cache.params, job.cache.seeds[row.worker], job.cache.steps[row.worker], job.greedy)
        for job, row in rows
    ]
    for job, row in rows:
        job.cache.steps[row.worker] += 1
    return [SharedSample(t, lp) for t, lp in sample_rows(jobs[0].cache.engine.runner, logits, draws)]
