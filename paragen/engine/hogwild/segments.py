"""A Hogwild! session's segments: runs of tokens in the engine's ref-counted blocks.

A segment's keys are stored rotated at ``base + j`` for its j-th token; its base is set by its first
write (where it then sits in the writing row's view), or taken from the segment it is folded from.
A session's first segment may begin with whole blocks of another live session's, taken instead of
computed (``cache.PromptHeads``: the session offers its own first blocks the same way).
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from paragen.engine.llm_engine import LLMEngine
from paragen.errors import EngineError


@dataclass(slots=True)
class Segment:
    blocks: list[int] = field(default_factory=list)
    length: int = 0
    base: int | None = None  # keys stored rotated at base + j; set by the first write (its offset)
    # the cache slot of each token (maybe a few more), int32: the fused kernel's reads copy them as memory
    slots: array[int] = field(default_factory=lambda: array("i"))


class Segments:
    """One session's segments by id, their blocks from the engine's pool (every one freed by ``close``)."""

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self._by_id: dict[int, Segment] = {}
        self._ids = itertools.count()

    def __contains__(self, seg: object) -> bool:
        return seg in self._by_id

    def __iter__(self) -> Iterator[int]:
        return iter(self._by_id)

    def __getitem__(self, seg: int) -> Segment:
        if seg not in self._by_id:
            raise EngineError(f"no segment {seg} in this session")
        return self._by_id[seg]

    def new(self) -> int:
        seg = next(self._ids)
        self._by_id[seg] = Segment()
        return seg

    def free(self, seg: int) -> None:
        self._release(seg)
        del self._by_id[seg]

    def empty(self, seg: int) -> None:
        """The segment with its blocks freed and nothing written (its next write places it anew)."""
        self._release(seg)
        self._by_id[seg] = Segment()

    def close(self) -> None:
        """Free every segment's blocks."""
        for seg in self._by_id:
            self._release(seg)
        self._by_id.clear()

    def _release(self, seg: int) -> None:
        """Free the segment's blocks, and offer them as a prompt's head no more."""
        blocks = self[seg].blocks
        self.engine.prompt_heads.drop((id(self), seg))
        self.engine.blocks.release(blocks)

    def lengths(self, view: Sequence[int], new_lengths: dict[int, int]) -> list[int]:
        """Each segment of ``view``'s length, after a pass that grows some to ``new_lengths``."""
        return [new_lengths.get(s, self[s].length) for s in view]

    def grow(self, new_lengths: dict[int, int]) -> None:
        """Blocks and slots for each segment to hold ``new_lengths[seg]`` tokens (all or none allocated)."""
        blocks = self.engine.blocks
        wanted = {s: blocks.num_blocks_for(n) - len(self[s].blocks) for s, n in new_lengths.items()}
        if not blocks.can_allocate(sum(wanted.values())):
            raise EngineError(
                f"the KV cache is full: this forward needs {sum(wanted.values())} more blocks, "
                f"{blocks.num_free_blocks} are free",
                hint="raise kv_cache_mb or free segments",
            )
        bs = blocks.block_size
        for seg, n in wanted.items():
            segment = self[seg]
            segment.blocks += blocks.allocate(n) if n > 0 else []
            have = len(segment.slots)  # a failed pass may have listed some already
            segment.slots.extend(segment.blocks[p // bs] * bs + p % bs for p in range(have, new_lengths[seg]))

    def take_head(self, seg: int, token_ids: list[int]) -> int:
        """How many of ``token_ids`` the empty ``seg`` took as whole blocks a live session's first
        segment shares with them (0 if none): their keys are there already, at base 0."""
        blocks = self.engine.prompt_heads.match(token_ids)
        if not blocks:
            return 0
        segment, bs = self[seg], self.engine.blocks.block_size
        segment.blocks = self.engine.blocks.share(blocks)
        segment.length = len(blocks) * bs
        segment.slots = array("i", (block * bs + p for block in blocks for p in range(bs)))
        segment.base = 0
        return segment.length

    def offer_head(self, seg: int, token_ids: list[int]) -> None:
        """Offer the first segment's whole blocks to sessions whose prompts begin with ``token_ids``."""
        self.engine.prompt_heads.keep((id(self), seg), token_ids, self[seg].blocks)
