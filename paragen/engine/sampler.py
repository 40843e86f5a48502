"""Batched sampling that is reproducible per sample, whatever else is in the batch.

Each row draws one uniform number from a counter-based hash of (its seed, its step),
then samples by inverse CDF over its own probabilities. A row's result therefore
depends only on its own logits, seed and step, never on the other rows (up to the
floating-point differences that batch size may cause in the matmuls before).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

import torch
import torch.nn.functional as F

_MASK32 = 0xFFFFFFFF
_BLOCK = 256  # tokens per block of the two-level CDF


def sample_seed(seed: int | None, index: int) -> int:
    """Sample ``index``'s own seed: the same for a sample whether it runs alone or with siblings."""
    base = secrets.randbits(31) if seed is None else seed
    digest = hashlib.blake2b(f"{base}:{index}".encode(), digest_size=4).digest()
    return int.from_bytes(digest) & 0x7FFFFFFF


@dataclass(slots=True)
class SampleBatch:
    """Per-row settings as tensors, built once per step by the model runner."""

    temperature: torch.Tensor  # [B] float; 0 = greedy
    top_p: torch.Tensor  # [B] float
    top_k: torch.Tensor  # [B] long; 0 = off
    seeds: torch.Tensor  # [B] long
    steps: torch.Tensor  # [B] long: how many tokens the row has generated so far
    is_filtered: bool  # any row uses top-p or top-k
    is_greedy_only: bool
    has_greedy: bool  # any row has temperature 0
    num_top_logprobs: int  # largest top_logprobs asked for (0 = none)
    wants_logprobs: bool
    # Rows whose token is fixed (a thinking budget's closing delimiter) and those tokens; None: none.
    forced: tuple[torch.Tensor, torch.Tensor] | None = None


@dataclass(slots=True)
class Sampled:
    token_ids: list[int]
    logprobs: list[float] | None
    top_logprobs: list[list[float]] | None


def uniform(seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """A uniform number in (0, 1) per row from a 32-bit integer hash of (seed, step)."""
    x = (seeds * 0x9E3779B1 + steps * 0x85EBCA77 + 0x165667B1) & _MASK32
    for mult in (0x7FEB352D, 0x846CA68B):  # lowbias32 rounds: full avalanche in a few int ops
        x = ((x ^ (x >> 16)) * mult) & _MASK32
    x = x ^ (x >> 16)
    return (x.double() + 0.5) / 4294967296.0


def sample(logits: torch.Tensor, batch: SampleBatch) -> Sampled:
    """Pick one token per row of ``logits`` [B, V] (float32)."""
    if batch.is_greedy_only:
        return _with_logprobs(logits, _forced(logits.argmax(dim=-1), batch), batch)
    inverse_temp = batch.temperature.clamp(min=1e-5).reciprocal().unsqueeze(1)
    probs = torch.softmax(logits * inverse_temp, dim=-1)  # a broadcast multiply: cheaper than a divide
    u = uniform(batch.seeds, batch.steps).to(probs.dtype)
    chosen = _filtered_draw(probs, u, batch) if batch.is_filtered else inverse_cdf_draw(probs, u)
    if batch.has_greedy:
        chosen = torch.where(batch.temperature > 0, chosen, logits.argmax(dim=-1))
    return _with_logprobs(logits, _forced(chosen, batch), batch)


def _forced(chosen: torch.Tensor, batch: SampleBatch) -> torch.Tensor:
    """``chosen`` with the forced rows' tokens put in. Their log-probabilities stay the model's own
    (of the forced token), as vLLM reports them: what the model thought of what it was made to write."""
    if batch.forced is None:
        return chosen
    rows, tokens = batch.forced
    return chosen.index_put((rows,), tokens)


def inverse_cdf_draw(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw of one index per row, never one with zero probability.

    A flat cumsum over the vocabulary runs sequentially (slow over a large batch and vocabulary), so
    the CDF is built in two levels: pick the block of ``_BLOCK`` tokens that holds the
    target mass, then the token inside it. Only the row's own values enter, in a fixed order.
    """
    rows, vocab = probs.shape
    num_blocks = -(-vocab // _BLOCK)
    if num_blocks * _BLOCK != vocab:
        probs = F.pad(probs, (0, num_blocks * _BLOCK - vocab))
    blocks = probs.view(rows, num_blocks, _BLOCK)
    block_mass = blocks.sum(dim=-1)
    block_cdf = block_mass.cumsum(dim=-1)
    target = (u * block_cdf[:, -1]).unsqueeze(1)
    block = torch.searchsorted(block_cdf, target).clamp_(max=num_blocks - 1)  # [rows, 1]
    inner_cdf = blocks.gather(1, block.unsqueeze(2).expand(rows, 1, _BLOCK)).squeeze(1).cumsum(dim=-1)
    inner_target = target - (block_cdf.gather(1, block) - block_mass.gather(1, block))
    # Rounding can push the target just outside (0, block total]; keeping it strictly inside
    # makes the first CDF entry >= target a token with positive probability.
    total = inner_cdf[:, -1:]
    smallest = torch.full_like(total, torch.finfo(total.dtype).tiny)
    inner_target = torch.minimum(torch.maximum(inner_target, smallest), total)
    inner = torch.searchsorted(inner_cdf, inner_target).clamp_(max=_BLOCK - 1)
    return (block * _BLOCK + inner).squeeze(1)


def _filtered_draw(probs: torch.Tensor, u: torch.Tensor, batch: SampleBatch) -> torch.Tensor:
    # Rows without a filter keep the vocabulary-order draw, so switching the filtered path on
    # for other rows in the batch never changes their samples.
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    rank = torch.arange(probs.shape[1], device=probs.device).unsqueeze(0)
    before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass strictly above each token
    drop = before > batch.top_p.unsqueeze(1)
    top_k = batch.top_k.unsqueeze(1)
    drop |= (top_k > 0) & (rank >= top_k)
    kept = sorted_probs.masked_fill(drop, 0.0)
    picked = order.gather(1, inverse_cdf_draw(kept, u).unsqueeze(1)).squeeze(1)
    has_filter = (batch.top_p < 1.0) | (batch.top_k > 0)
    return torch.where(has_filter, picked, inverse_cdf_draw(probs, u))


def _with_logprobs(logits: torch.Tensor, chosen: torch.Tensor, batch: SampleBatch) -> Sampled:
    if not batch.wants_logprobs and not batch.num_top_logprobs:
        return Sampled(chosen.tolist(), None, None)
    if not batch.num_top_logprobs:  # the chosen tokens' alone: no [B, V] log_softmax written out
        chosen_logits = logits.gather(1, chosen.unsqueeze(1)).squeeze(1)
        return Sampled(chosen.tolist(), (chosen_logits - torch.logsumexp(logits, dim=-1)).tolist(), None)
    logp = torch.log_softmax(logits, dim=-1)
    picked = logp.gather(1, chosen.unsqueeze(1)).squeeze(1).tolist()
    tops = logp.topk(batch.num_top_logprobs, dim=-1).values.tolist()
    return Sampled(chosen.tolist(), picked, tops)
