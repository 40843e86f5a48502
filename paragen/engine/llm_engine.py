"""The synchronous engine: add requests, step, abort. Not thread-safe (see async_engine)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from paragen.engine import loader
from paragen.engine.cache import BlockManager, KVCache, PromptHeads
from paragen.engine.detokenizer import Detokenizer
from paragen.engine.host import keep_freed_memory, pick_dtype
from paragen.engine.model import Model
from paragen.engine.model_runner import ModelRunner
from paragen.engine.sampler import sample_seed
from paragen.engine.scheduler import Scheduler
from paragen.engine.sequence import SeqParams, SeqStatus, Sequence
from paragen.engine.thinking import ThinkingBudget, ThinkingSpec
from paragen.errors import EngineError
from paragen.types import SamplingParams


@dataclass(slots=True)
class StepOutput:
    """One new token of one sequence (text may be empty while a character or stop string is pending)."""

    seq_id: int
    token_id: int
    text: str
    logprob: float | None = None
    top_logprobs: list[float] | None = None
    finish_reason: str | None = None


class LLMEngine:
    def __init__(
        self,
        target: str | None = None,
        *,
        dtype: str = "auto",
        device: str = "cpu",
        kv_cache_mb: int = 1024,
        num_blocks: int | None = None,
        block_size: int = 16,
        max_batch: int = 256,
        threads: int | None = None,
    ):
        self.num_threads = threads or os.cpu_count() or 1
        if device == "cpu":
            torch.set_num_threads(self.num_threads)
            keep_freed_memory()
        model_dir = loader.resolve(target)
        self.target, self.model_dir = target, model_dir  # what was asked for, and what was loaded
        self.cfg = loader.load_config(model_dir)
        self.tokenizer: Any = loader.load_tokenizer(model_dir)
        self.dtype = pick_dtype(dtype, device)
        # tensors read shard by shard onto the device as the model takes them (loader.Checkpoint)
        self.model = Model(self.cfg, loader.Checkpoint(model_dir, device), self.dtype, device)
        if num_blocks is None:
            num_blocks = max(
                1, kv_cache_mb * 2**20 // KVCache.bytes_per_block(self.cfg, block_size, self.dtype)
            )
        self.blocks = BlockManager(num_blocks, block_size)
        self.cache = KVCache(self.cfg, num_blocks, block_size, self.dtype, device)
        self.prompt_heads = PromptHeads(block_size)  # Hogwild! sessions' first blocks, for those alike
        max_seq_len = min(self.cfg.max_position_embeddings, num_blocks * block_size)
        self.scheduler = Scheduler(self.blocks, self.cache, max_batch, max_seq_len)
        self.runner = ModelRunner(self.model, self.cache)
        self.seqs: dict[int, Sequence] = {}
        self.num_prefilled_tokens = 0  # tokens run through a prefill (not reused from the cache)
        self.num_steps = 0  # forward passes run by step() (what an abort's latency is counted in)
        self.eos_ids = set(self.cfg.eos_token_ids) | {self.tokenizer.eos_token_id} - {None}

    def memory(self) -> dict[str, int]:
        """Bytes on the device: the weights, the KV cache's pool, and one token's K and V over every
        layer (a worker's view costs this a token; Hogwild! workers hold the prompt and history once)."""
        block = KVCache.bytes_per_block(self.cfg, self.blocks.block_size, self.dtype)
        model = self.model
        embed = 0 if self.cfg.tie_word_embeddings else model.embed.numel() * model.embed.element_size()
        return {
            "weights": model.num_weight_bytes + embed,
            "kv_cache": block * self.blocks.num_blocks,
            "kv_per_token": block // self.blocks.block_size,
        }

    @property
    def num_free_blocks(self) -> int:
        return self.blocks.num_free_blocks

    @property
    def is_idle(self) -> bool:
        return self.scheduler.is_idle

    def add_request(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        n: int = 1,
        *,
        share_prefix: bool = True,
        ignore_eos: bool = False,
    ) -> list[int]:
        """Queue ``n`` samples of one prompt; returns their sequence ids (sample i is ids[i])."""
        seqs = self.new_request(prompt_ids, params, n, share_prefix=share_prefix, ignore_eos=ignore_eos)
        self.enqueue(seqs)
        return [seq.seq_id for seq in seqs]

    def new_request(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        n: int = 1,
        *,
        share_prefix: bool = True,
        ignore_eos: bool = False,
        thinking: ThinkingSpec | None = None,
    ) -> list[Sequence]:
        """Validate and build the sequences of a request without touching engine state (any thread);
        ``thinking``: the request's thinking budget (``thinking.py``), each sample counting its own."""
        self.check_fits(len(prompt_ids), n)
        seqs = [self._new_seq(prompt_ids, params, i) for i in range(n)]
        for seq in seqs:
            seq.params.ignore_eos = ignore_eos  # benchmarks: fixed lengths
            seq.thinking = None if thinking is None else ThinkingBudget(thinking)
        if share_prefix:
            seqs[0].forks = seqs[1:]
            for child in seqs[1:]:
                child.status = SeqStatus.FORKING
        return seqs

    def enqueue(self, seqs: list[Sequence]) -> None:
        """Hand sequences from new_request() to the scheduler (the step thread only)."""
        for seq in seqs:
            if seq.fork_of is not None:
                self.scheduler.attach(seq, self.seqs.get(seq.fork_of))
            if seq.status == SeqStatus.WAITING:
                self.scheduler.add(seq)
        self.seqs.update((seq.seq_id, seq) for seq in seqs)

    def check_fits(self, num_prompt_tokens: int, n: int) -> None:
        if num_prompt_tokens == 0:
            raise EngineError("the prompt has no tokens")
        if num_prompt_tokens >= self.scheduler.max_seq_len:
            raise EngineError(
                f"the prompt has {num_prompt_tokens} tokens; this engine holds at most "
                f"{self.scheduler.max_seq_len - 1} per sequence",
                hint="shorten the prompt or raise kv_cache_mb",
            )
        needed = self.blocks.num_blocks_for(num_prompt_tokens) + n
        if needed > self.blocks.num_blocks or n > self.scheduler.max_batch:
            raise EngineError(
                f"{n} samples of a {num_prompt_tokens}-token prompt need {needed} KV blocks and "
                f"{n} batch slots; the engine has {self.blocks.num_blocks} blocks "
                f"and {self.scheduler.max_batch} slots",
                hint="lower n or raise kv_cache_mb / max_batch",
            )

    def _new_seq(self, prompt_ids: list[int], params: SamplingParams, index: int) -> Sequence:
        sp = SeqParams(
            max_tokens=params.max_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k,
            seed=sample_seed(params.seed, index),
            stop=params.stop,
            logprobs=params.logprobs,
            top_logprobs=params.top_logprobs,
        )
        return Sequence(list(prompt_ids), len(prompt_ids), sp, Detokenizer(self.tokenizer, params.stop))

    def abort(self, seq_id: int) -> bool:
        """Stop a sequence and free its cache; False if it had already finished."""
        seq = self.seqs.pop(seq_id, None)
        if seq is None or seq.is_finished:
            return False
        if seq.status == SeqStatus.FORKING:
            for parent in self.scheduler.waiting:
                if seq in parent.forks:
                    parent.forks.remove(seq)
        elif seq.forks:  # a waiting parent: its first sibling takes over the prefill
            heir, *rest = seq.forks
            heir.forks, heir.status, seq.forks = rest, SeqStatus.WAITING, []
            for sibling in rest:
                assert sibling.status == SeqStatus.FORKING
            self.scheduler.waiting[self.scheduler.waiting.index(seq)] = heir
        self.scheduler.finish(seq, "abort")
        return True

    def step(self) -> list[StepOutput]:
        seqs, is_prefill = self.scheduler.schedule()
        if not seqs:
            return []
        self.num_steps += 1
        if is_prefill:
            seqs = [seqs[0], *seqs[0].forks]
            self.num_prefilled_tokens += seqs[0].num_tokens - seqs[0].num_cached_tokens
        sampled = self.runner.run(seqs, is_prefill)
        if is_prefill:
            seqs[0].num_cached_tokens = seqs[0].num_tokens
            self.scheduler.fork(seqs[0])
        else:
            for seq in seqs:
                seq.num_cached_tokens += 1
        logprobs, tops = sampled.logprobs, sampled.top_logprobs
        return [
            self._postprocess(
                seq,
                token,
                None if logprobs is None or not seq.params.logprobs else logprobs[i],
                None if tops is None or not seq.params.top_logprobs else tops[i][: seq.params.top_logprobs],
            )
            for i, (seq, token) in enumerate(zip(seqs, sampled.token_ids, strict=True))
        ]

    def _postprocess(
        self, seq: Sequence, token: int, logprob: float | None, top: list[float] | None
    ) -> StepOutput:
        seq.token_ids.append(token)
        text, is_stop = seq.detok.add(token)
        if seq.thinking is not None:
            seq.thinking.observe(seq.detok.text)
            if seq.thinking.phase == "done":
                seq.thinking = None  # nothing left to force: later steps skip the budget
        reason = None
        if is_stop or (token in self.eos_ids and not seq.params.ignore_eos):
            reason = "stop"
        elif (
            seq.num_completion_tokens >= seq.params.max_tokens or seq.num_tokens >= self.scheduler.max_seq_len
        ):
            reason = "length"
        if reason is not None:
            text += "" if is_stop else seq.detok.flush()
            self.scheduler.finish(seq, reason)
            self.seqs.pop(seq.seq_id, None)
        return StepOutput(seq.seq_id, token, text, logprob, top, reason)

    def generate(
        self, prompts: list[list[int]], params: SamplingParams, n: int = 1, *, share_prefix: bool = True
    ) -> list[list[list[int]]]:
        """Run to completion; completion token ids per prompt per sample (for tests and benchmarks)."""
        ids = [self.add_request(p, params, n, share_prefix=share_prefix) for p in prompts]
        out: dict[int, list[int]] = {i: [] for group in ids for i in group}
        while not self.is_idle:
            for o in self.step():
                out[o.seq_id].append(o.token_id)
        return [[out[i] for i in group] for group in ids]
