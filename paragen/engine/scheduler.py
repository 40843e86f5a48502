"""Which sequences run in the next step, and their cache blocks.

Prefill first (one prompt per step, so its n samples fork from it right after),
otherwise one decode step over every running sequence. When a decode step needs a
block and none is free, the newest running sequence is preempted: its blocks are
freed and it is recomputed later from its tokens (nothing it streamed is lost).
A running sequence whose reader has stopped reading (``Sequence.stalled``) sits out decode
steps with its cache kept, until its reader catches up, unless it holds the room a waiting prompt
needs while nothing else runs: then it decodes as if read.
"""

from __future__ import annotations

from collections import deque

from paragen.engine.cache import BlockManager, KVCache
from paragen.engine.sequence import SeqStatus, Sequence


class Scheduler:
    def __init__(self, blocks: BlockManager, cache: KVCache, max_batch: int, max_seq_len: int):
        self.blocks = blocks
        self.cache = cache
        self.max_batch = max_batch
        self.max_seq_len = max_seq_len
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    @property
    def is_idle(self) -> bool:
        return not self.waiting and not self.running

    @property
    def num_seqs(self) -> int:
        return len(self.waiting) + len(self.running)

    def add(self, seq: Sequence) -> None:
        assert seq.status == SeqStatus.WAITING
        self.waiting.append(seq)

    def schedule(self) -> tuple[list[Sequence], bool]:
        """The sequences of the next step and whether it is a prefill."""
        if self.waiting:
            seq = self.waiting[0]
            num_free_slots = self.max_batch - len(self.running)
            if 1 + len(seq.forks) <= max(num_free_slots, 0) and self.can_prefill(seq):
                self.waiting.popleft()
                self.allocate_prompt(seq)
                return [seq], True
        batch = self.prepare_decode_batch()
        if not batch and self.waiting:
            # Nothing else runs and a waiting prompt cannot start: stalled sequences hold its batch
            # slots or blocks, so they decode as if read (finishing, or preempted for room) rather
            # than hold the engine still for good.
            batch = self.prepare_decode_batch(include_stalled=True)
        return batch, False

    def can_prefill(self, seq: Sequence) -> bool:
        # The prompt, plus one block of room per sample so their first decode steps can proceed.
        needed = self.blocks.num_blocks_for(seq.num_tokens) - len(seq.block_table) + len(seq.forks) + 1
        return self.blocks.can_allocate(needed) or (not self.running and self.blocks.can_allocate(needed - 1))

    def allocate_prompt(self, seq: Sequence) -> None:
        # A fork (see attach) already holds the blocks of the cache it reuses.
        seq.block_table += self.blocks.allocate(
            self.blocks.num_blocks_for(seq.num_tokens) - len(seq.block_table)
        )
        seq.status = SeqStatus.RUNNING
        self.running.append(seq)

    def fork(self, parent: Sequence) -> list[Sequence]:
        """Give each waiting sibling the parent's prompt cache: full blocks shared, the last one copied."""
        children, parent.forks = parent.forks, []
        size = self.blocks.block_size
        num_full, num_rest = divmod(parent.num_cached_tokens, size)
        for child in children:
            table = self.blocks.share(parent.block_table[:num_full])
            if num_rest:
                (own,) = self.blocks.allocate(1)
                self.cache.copy_block(parent.block_table[num_full], own, num_rest)
                table.append(own)
            child.block_table = table
            child.num_cached_tokens = parent.num_cached_tokens
            child.status = SeqStatus.RUNNING
            self.running.append(child)
        return children

    def attach(self, seq: Sequence, parent: Sequence | None) -> None:
        """Start waiting ``seq`` from ``parent``'s cache where their tokens agree: full blocks shared,
        the last partial one copied (copy on write, as fork does); only the rest is prefilled. A
        parent that is gone or not running leaves ``seq`` to a full prefill."""
        if parent is None or parent.status != SeqStatus.RUNNING:
            return
        limit = min(parent.num_cached_tokens, seq.num_tokens - 1)  # at least one token to prefill
        same = next((i for i in range(limit) if parent.token_ids[i] != seq.token_ids[i]), limit)
        if same == 0:
            return
        num_full, num_rest = divmod(same, self.blocks.block_size)
        if num_rest and not self.blocks.can_allocate(1):
            return
        table = self.blocks.share(parent.block_table[:num_full])
        if num_rest:
            (own,) = self.blocks.allocate(1)
            self.cache.copy_block(parent.block_table[num_full], own, num_rest)
            table.append(own)
        seq.block_table, seq.num_cached_tokens, seq.num_reused_tokens = table, same, same

    def prepare_decode_batch(self, *, include_stalled: bool = False) -> list[Sequence]:
        """Make sure every running sequence (not stalled, unless ``include_stalled``) has a slot for
        its next token; preempt if the pool is dry."""
        batch: list[Sequence] = []
        for seq in list(self.running):
            if seq.status != SeqStatus.RUNNING or (seq.stalled and not include_stalled):
                continue  # preempted below while making room for an earlier one, or unread
            if self.ensure_slot(seq):
                batch.append(seq)
        return batch

    def ensure_slot(self, seq: Sequence) -> bool:
        if seq.num_cached_tokens < len(seq.block_table) * self.blocks.block_size:
            return True
        while not self.blocks.can_allocate(1):
            victim = self.running[-1]
            self.preempt(victim)
            if victim is seq:
                return False
        seq.block_table += self.blocks.allocate(1)
        return True

    def preempt(self, seq: Sequence) -> None:
        self.free(seq)
        seq.status = SeqStatus.WAITING
        self.waiting.appendleft(seq)

    def free(self, seq: Sequence) -> None:
        if seq in self.running:
            self.running.remove(seq)
        self.blocks.release(seq.block_table)
        seq.block_table = []
        seq.num_cached_tokens = 0

    def finish(self, seq: Sequence, reason: str) -> None:
        self.free(seq)
        if seq in self.waiting:
            self.waiting.remove(seq)
        seq.status = SeqStatus.FINISHED
        seq.finish_reason = reason
