"""Turns scheduled sequences into tensors, runs the model, samples."""

from __future__ import annotations

import torch

from paragen.engine import cuda_graphs
from paragen.engine.attention import AttnMeta
from paragen.engine.cache import KVCache
from paragen.engine.kernels import fused, triton_attention
from paragen.engine.model import Model
from paragen.engine.sampler import SampleBatch, Sampled, sample
from paragen.engine.sequence import Sequence


class ModelRunner:
    def __init__(self, model: Model, cache: KVCache):
        self.model = model
        self.cache = cache
        self.device = model.device
        self.block_size = cache.block_size
        self.num_kv_rows = cache.kv.shape[1]  # K heads then V heads
        self._graphs: cuda_graphs.Graphs | None = None

    @property
    def graphs(self) -> cuda_graphs.Graphs | None:
        """Decode passes from CUDA graphs (``cuda_graphs.py``), where they run; made on first use."""
        # A model with experts picks them per step on the host (moe.py): a graph cannot replay that.
        has_experts = self.model.cfg.experts is not None
        if has_experts or not cuda_graphs.enabled(self.device, self.cache.kv.dtype):
            return None
        if self._graphs is None:
            self._graphs = cuda_graphs.Graphs(self.model, self.cache.kv, self.block_size)
        return self._graphs

    def tensor(
        self, data: list[int] | list[float] | list[list[int]], dtype: torch.dtype = torch.long
    ) -> torch.Tensor:
        """Host data on the model's device (the runner's and the Hogwild! sessions' one way in)."""
        return torch.tensor(data, dtype=dtype).to(self.device, non_blocking=True)

    def prepare_prefill(self, seq: Sequence) -> tuple[torch.Tensor, torch.Tensor, AttnMeta]:
        start, bs = seq.num_cached_tokens, self.block_size
        every = [seq.block_table[p // bs] * bs + p % bs for p in range(seq.num_tokens)]
        slots = every[start:]
        # Over a reused cache (a fork) the new tokens also attend to the cached ones.
        context = self.tensor(every) if start else None
        meta = AttnMeta(is_prefill=True, slots=self.tensor(slots), context=context, start=start)
        positions = list(range(start, seq.num_tokens))
        return self.tensor(seq.token_ids[start:]), self.tensor(positions), meta

    def prepare_decode(self, seqs: list[Sequence]) -> tuple[torch.Tensor, torch.Tensor, AttnMeta]:
        bs = self.block_size
        positions = [seq.num_cached_tokens for seq in seqs]
        slots = [seq.block_table[p // bs] * bs + p % bs for seq, p in zip(seqs, positions, strict=True)]
        # Rows are padded to the same number of blocks with block 0; the mask hides those slots.
        num_blocks = max(len(seq.block_table) for seq in seqs)
        tables = self.tensor([seq.block_table + [0] * (num_blocks - len(seq.block_table)) for seq in seqs])
        ids = self.tensor([seq.last_token for seq in seqs])
        lengths = self.tensor(positions) + 1
        if triton_attention.enabled(self.device, self.cache.kv.dtype):  # the reads built on the device
            reads = triton_attention.decode_reads(tables, lengths, max(positions) + 1, bs)
            return ids, lengths - 1, AttnMeta(is_prefill=False, slots=self.tensor(slots), triton_reads=reads)
        if fused.enabled(self.device, self.cache.kv.dtype):  # on the CPU: tables are host tensors
            host_reads = fused.decode_reads(tables, lengths, bs)
            return (
                ids,
                lengths - 1,
                AttnMeta(is_prefill=False, slots=self.tensor(slots), fused_reads=host_reads),
            )
        heads = torch.arange(self.num_kv_rows, device=self.device).unsqueeze(1) * self.cache.num_blocks
        gather = (heads + tables.view(1, -1)).view(-1)
        context = num_blocks * bs
        is_full = min(positions) == context - 1  # every row fills its last block: nothing to hide
        mask = None if is_full else self._pad_mask(lengths, context).view(len(seqs), 1, -1)
        meta = AttnMeta(is_prefill=False, slots=self.tensor(slots), block_size=bs, gather=gather, mask=mask)
        return ids, lengths - 1, meta

    def _pad_mask(self, lengths: torch.Tensor, max_len: int) -> torch.Tensor:
        is_pad = torch.arange(max_len, device=self.device).unsqueeze(0) >= lengths.unsqueeze(1)
        return torch.zeros(is_pad.shape, device=self.device).masked_fill_(is_pad, float("-inf"))

    def prepare_sample(self, seqs: list[Sequence]) -> SampleBatch:
        params = [seq.params for seq in seqs]
        temps = [p.temperature for p in params]
        forced = [
            (row, token)
            for row, seq in enumerate(seqs)
            if seq.thinking is not None and (token := seq.thinking.forced()) is not None
        ]
        return SampleBatch(
            temperature=self.tensor(temps, torch.float32),
            top_p=self.tensor([p.top_p for p in params], torch.float32),
            top_k=self.tensor([p.top_k for p in params]),
            seeds=self.tensor([p.seed for p in params]),
            steps=self.tensor([seq.num_completion_tokens for seq in seqs]),
            is_filtered=any(p.top_p < 1.0 or p.top_k > 0 for p in params),
            is_greedy_only=not any(temps),
            has_greedy=not all(temps),
            num_top_logprobs=max(p.top_logprobs for p in params),
            wants_logprobs=any(p.logprobs for p in params),
            forced=(self.tensor([r for r, _ in forced]), self.tensor([t for _, t in forced]))
            if forced
            else None,
        )

    @torch.inference_mode()
    def run(self, seqs: list[Sequence], is_prefill: bool) -> Sampled:
        """One forward; for a prefill, ``seqs`` is the prompt's sequence followed by its forks."""
        graphs = None if is_prefill or len(seqs) > cuda_graphs.MAX_TOKENS else self.graphs
        if graphs is not None:
            return sample(self._replay_decode(graphs, seqs), self.prepare_sample(seqs))
        if is_prefill:
            ids, pos, meta = self.prepare_prefill(seqs[0])
        else:
            ids, pos, meta = self.prepare_decode(seqs)
        hidden = self.model.forward(ids, pos, meta, self.cache.kv)
        if is_prefill:  # the prompt's n samples all start from its last position's logits
            logits = self.model.logits(hidden[-1:]).expand(len(seqs), -1)
        else:
            logits = self.model.logits(hidden)
        return sample(logits, self.prepare_sample(seqs))

    def _replay_decode(self, graphs: cuda_graphs.Graphs, seqs: list[Sequence]) -> torch.Tensor:
        bs = self.block_size
        positions = [seq.num_cached_tokens for seq in seqs]
        slots = [seq.block_table[p // bs] * bs + p % bs for seq, p in zip(seqs, positions, strict=True)]
        ids = [seq.last_token for seq in seqs]
        return graphs.decode(ids, positions, slots, [seq.block_table for seq in seqs])
