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
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from paragen.backends.base import SharedRow, SharedSample
from paragen.engine.attention import Attend, AttnMeta
from paragen.engine.llm_engine import LLMEngine, sample_seed
from paragen.engine.sampler import SampleBatch, sample
from paragen.engine.shared_attention import RowPlan, build_group, shared_attention
from paragen.errors import EngineError
from paragen.types import SamplingParams


@dataclass(slots=True)
class Segment:
    blocks: list[int] = field(default_factory=list)
    length: int = 0


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
        self.is_closed = False

    def new_segment(self) -> int:
        self._check_open()
        seg = next(self._ids)
        self.segments[seg] = Segment()
        return seg

    def free_segment(self, seg: int) -> None:
        self._check_open()
        self.engine.blocks.release(self._segment(seg).blocks)
        del self.segments[seg]

    def close(self) -> None:
        """Free every segment's blocks (idempotent)."""
        for segment in self.segments.values():
            self.engine.blocks.release(segment.blocks)
        self.segments.clear()
        self.is_closed = True

    def length(self, seg: int) -> int:
        return self._segment(seg).length

    @torch.inference_mode()
    def forward(
        self, rows: Sequence[SharedRow], suppress_token_ids: Sequence[int] = (), greedy: bool = False
    ) -> list[SharedSample]:
        """One forward pass: every row's tokens written, every row's next token sampled (row order)."""
        logits = self.logits(rows)
        if suppress_token_ids:
            logits[:, list(suppress_token_ids)] = float("-inf")
        return self._sample(rows, logits, greedy)

    @torch.inference_mode()
    def logits(self, rows: Sequence[SharedRow]) -> torch.Tensor:
        """One forward pass: every row's tokens written; the logits [rows, vocab] at each row's last token."""
        self._check_open()
        new_lengths = self._check_rows(rows)
        self._grow(new_lengths)
        order = sorted(range(len(rows)), key=lambda i: len(rows[i].token_ids) > 1)  # 1-token rows first
        ids, pos, slots, last = self._inputs(rows, order)
        attend = self._attention(rows, order, new_lengths, len(ids))
        runner = self.engine.runner
        meta = AttnMeta(is_prefill=False, slots=runner._tensor(slots))
        hidden = self.engine.model.forward(
            runner._tensor(ids), runner._tensor(pos), meta, self.engine.cache.kv, attend
        )
        for seg, length in new_lengths.items():
            self.segments[seg].length = length
        return self.engine.model.logits(hidden[runner._tensor(last)])

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
        for seg, n in wanted.items():
            self.segments[seg].blocks += blocks.allocate(n) if n > 0 else []

    def _inputs(
        self, rows: Sequence[SharedRow], order: list[int]
    ) -> tuple[list[int], list[int], list[int], list[int]]:
        """Token ids, key positions (segment-local), cache slots, and each row's last token index."""
        bs = self.engine.blocks.block_size
        ids: list[int] = []
        pos: list[int] = []
        slots: list[int] = []
        last = [0] * len(rows)
        for i in order:
            row = rows[i]
            segment = self.segments[row.view[-1]]
            local = range(segment.length, segment.length + len(row.token_ids))
            ids += row.token_ids
            pos += local
            slots += [segment.blocks[p // bs] * bs + p % bs for p in local]
            last[i] = len(ids) - 1
        return ids, pos, slots, last

    def _attention(
        self, rows: Sequence[SharedRow], order: list[int], new_lengths: dict[int, int], num_tokens: int
    ) -> Attend:
        bs = self.engine.blocks.block_size
        plans = []
        for i in order:
            row = rows[i]
            lengths = [new_lengths.get(s, self.segments[s].length) for s in row.view]
            tables = [self.segments[s].blocks[: -(-n // bs)] for s, n in zip(row.view, lengths, strict=True)]
            plans.append(RowPlan(tables, lengths, len(row.token_ids)))
        model, cache = self.engine.model, self.engine.cache
        rope = (model.cos, model.sin)
        num_kv_rows = cache.kv.shape[1]
        singles = [p for p in plans if p.num_new == 1]
        groups = [build_group(singles, 0, bs, cache.num_blocks, num_kv_rows, rope)] if singles else []
        start = len(singles)
        for plan in plans[len(singles) :]:
            groups.append(build_group([plan], start, bs, cache.num_blocks, num_kv_rows, rope))
            start += plan.num_new
        return shared_attention(
            groups,
            num_tokens=num_tokens,
            num_heads=model.num_heads,
            num_kv_heads=model.cfg.num_kv_heads,
            head_dim=model.head_dim,
            block_size=bs,
            scale=model.attn_scale,
            dtype=model.dtype,
        )

    def _sample(self, rows: Sequence[SharedRow], logits: torch.Tensor, greedy: bool) -> list[SharedSample]:
        p, runner = self.params, self.engine.runner
        n = len(rows)
        temperature = 0.0 if greedy else p.temperature
        batch = SampleBatch(
            temperature=runner._tensor([temperature] * n, torch.float32),
            top_p=runner._tensor([p.top_p] * n, torch.float32),
            top_k=runner._tensor([p.top_k] * n),
            seeds=runner._tensor([self.seeds[row.worker] for row in rows]),
            steps=runner._tensor([self.steps[row.worker] for row in rows]),
            is_filtered=p.top_p < 1.0 or p.top_k > 0,
            is_greedy_only=temperature == 0.0,
            has_greedy=temperature == 0.0,
            num_top_logprobs=0,
            wants_logprobs=True,
        )
        sampled = sample(logits, batch)
        for row in rows:
            self.steps[row.worker] += 1
        assert sampled.logprobs is not None
        return [
            SharedSample(token_id=t, logprob=lp)
            for t, lp in zip(sampled.token_ids, sampled.logprobs, strict=True)
        ]
