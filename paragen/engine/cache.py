"""The paged KV cache: a pool of fixed-size blocks with reference counts.

A sequence's cache is its ``block_table``: an ordered list of block ids, its view of
the pool. Blocks are reference-counted, so several sequences can hold the same block
(the n samples of one prompt share the prompt's full blocks). Nothing here assumes
that a block belongs to one sequence or that a view is a prefix of another: Hogwild!
workers can later hold views that interleave shared and own blocks, each attending
with its own positions (RoPE offsets are applied by the model, not stored here).
"""

from __future__ import annotations

import torch

from paragen.engine.attention import rope_
from paragen.engine.model_config import ModelConfig


class BlockManager:
    """Allocation bookkeeping only (pure Python, no tensors)."""

    def __init__(self, num_blocks: int, block_size: int):
        assert num_blocks > 0 and block_size > 0
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.ref_counts = [0] * num_blocks
        # A stack, not a queue: the most recently freed blocks are reused first, so the blocks
        # in use stay few and close together however long the engine runs. A decode step
        # gathers every row's blocks; spread over a large pool that gather runs slower.
        self.free_ids = list(range(num_blocks - 1, -1, -1))

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_ids)

    def num_blocks_for(self, num_tokens: int) -> int:
        return (num_tokens + self.block_size - 1) // self.block_size

    def can_allocate(self, num_new_blocks: int) -> bool:
        return num_new_blocks <= len(self.free_ids)

    def allocate(self, num_new_blocks: int) -> list[int]:
        assert self.can_allocate(num_new_blocks), "allocate() without can_allocate()"
        ids = [self.free_ids.pop() for _ in range(num_new_blocks)]
        for block_id in ids:
            assert self.ref_counts[block_id] == 0
            self.ref_counts[block_id] = 1
        return ids

    def share(self, block_ids: list[int]) -> list[int]:
        """Take one more reference on each block (a second view of the same KV)."""
        for block_id in block_ids:
            assert self.ref_counts[block_id] > 0, "sharing a free block"
            self.ref_counts[block_id] += 1
        return list(block_ids)

    def release(self, block_ids: list[int]) -> None:
        for block_id in block_ids:
            assert self.ref_counts[block_id] > 0, "double free"
            self.ref_counts[block_id] -= 1
            if self.ref_counts[block_id] == 0:
                self.free_ids.append(block_id)

    def is_shared(self, block_id: int) -> bool:
        return self.ref_counts[block_id] > 1


class KVCache:
    """Keys and values in one tensor: [layers, 2 * kv_heads, num_blocks * block_size, head_dim].

    Slots are flat (``block_id * block_size + offset``). The K heads come first, then the V
    heads, with the slot axis inside the head axis: a decode step writes a layer's new keys and
    values with one ``index_copy_`` and gathers a batch's whole context with one
    ``index_select``, already laid out as the batched matmuls want it (no further copies).
    """

    def __init__(self, cfg: ModelConfig, num_blocks: int, block_size: int, dtype: torch.dtype, device: str):
        shape = (cfg.num_layers, 2 * cfg.num_kv_heads, num_blocks * block_size, cfg.head_dim)
        self.kv = torch.zeros(shape, dtype=dtype, device=device)
        self.num_blocks = num_blocks
        self.block_size = block_size

    @staticmethod
    def bytes_per_block(cfg: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
        itemsize = torch.empty((), dtype=dtype).element_size()
        return 2 * cfg.num_layers * block_size * cfg.num_kv_heads * cfg.head_dim * itemsize

    def copy_block(self, src: int, dst: int, num_tokens: int) -> None:
        """Copy the first ``num_tokens`` slots of block ``src`` into ``dst`` (copy on write)."""
        a, b = src * self.block_size, dst * self.block_size
        self.kv[:, :, b : b + num_tokens] = self.kv[:, :, a : a + num_tokens]

    def copy_slots(self, src: torch.Tensor, dst: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
        """Copy slots ``src`` into ``dst`` in every layer, the keys rotated once more by ``cos``/``sin``.

        A Hogwild! step folded into the history moves this way: its values unchanged, its keys
        turned from where they were written to where they now sit (fp32, rounded once).
        """
        moved = self.kv.index_select(2, src)  # [layers, 2 * kv_heads, n, head_dim]
        keys = moved[:, : moved.shape[1] // 2]
        turned = keys.float()
        rope_(turned, cos.float(), sin.float())
        keys.copy_(turned)
        self.kv.index_copy_(2, dst, moved)


class PromptHeads:
    """The full blocks of the prompts that live Hogwild! sessions began with, for sessions that begin alike.

    Every problem of an eval starts its sessions with the same instructions (~280 tokens of a ~300
    token prompt): a session whose first segment begins with a live session's whole blocks takes
    those blocks (one more reference each) instead of computing them again. An entry points
    at blocks its session holds and takes no reference of its own: the session drops it before
    freeing them.
    Keys and values of a token depend only on the tokens before it and its position, and a first
    segment starts at position 0, so a taken block holds what the session would have computed.
    """

    def __init__(self, block_size: int):
        self.block_size = block_size
        self._entries: dict[tuple[int, int], tuple[list[int], list[int]]] = {}  # owner -> (token ids, blocks)

    def match(self, token_ids: list[int]) -> list[int]:
        """The blocks of the longest run of whole blocks an entry shares with ``token_ids`` (at least
        one token is left over: its forward gives the prompt's next token)."""
        bs = self.block_size
        best: list[int] = []
        room = (len(token_ids) - 1) // bs
        for tokens, blocks in self._entries.values():
            n = 0
            while (
                n < min(room, len(blocks))
                and tokens[n * bs : (n + 1) * bs] == token_ids[n * bs : (n + 1) * bs]
            ):
                n += 1
            if n > len(best):
                best = blocks[:n]
        return best

    def keep(self, owner: tuple[int, int], token_ids: list[int], blocks: list[int]) -> None:
        n = min(len(blocks), len(token_ids) // self.block_size)
        if n:
            self._entries[owner] = (token_ids[: n * self.block_size], blocks[:n])

    def drop(self, owner: tuple[int, int]) -> None:
        self._entries.pop(owner, None)
