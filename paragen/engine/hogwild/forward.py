"""One model forward over the placed rows of Hogwild! sessions, and their samples.

``session.py`` decides where each row's tokens go and what they attend (a ``Placed`` row); this
module plans what every token of the pass reads, once (``reads.py``), hands the plan to one of the
attentions (the Triton kernel on CUDA, replayed from a CUDA graph by ``graphs.py``; the fused C
kernel on a CPU; else torch's: ``kernels/``), runs the model's forward, and samples each row with
its own settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from paragen.engine import cuda_graphs
from paragen.engine.attention import Attend, AttnMeta
from paragen.engine.hogwild.graphs import replay_pass
from paragen.engine.hogwild.reads import ReadsPlan, RowView, plan_reads
from paragen.engine.kernels import fused, torch_attention, triton_attention
from paragen.engine.llm_engine import LLMEngine
from paragen.engine.model_runner import ModelRunner
from paragen.engine.sampler import SampleBatch, sample
from paragen.types import SamplingParams


@dataclass(slots=True)
class Placed:
    """A row placed in the cache: its token ids, their stored positions and slots, and its view."""

    ids: list[int]
    pos: list[int]
    slots: Sequence[int]
    view: RowView


def model_logits(engine: LLMEngine, rows: Sequence[Placed]) -> torch.Tensor:
    """One model forward over the placed rows; the logits [rows, vocab] at each row's last token."""
    order = sorted(range(len(rows)), key=lambda i: rows[i].view.num_new)  # rows of one length adjacent
    ids: list[int] = []
    pos: list[int] = []
    slots: list[int] = []
    last = [0] * len(rows)
    for i in order:
        ids += rows[i].ids
        pos += rows[i].pos
        slots += rows[i].slots
        last[i] = len(ids) - 1
    plan = plan_reads([rows[i].view for i in order])  # what every token reads, for any attention
    runner, tables = engine.runner, (engine.model.cos, engine.model.sin)
    graphs = runner.graphs if len(ids) <= cuda_graphs.MAX_TOKENS else None
    if graphs is not None:  # the graph's logits are its own buffer: the caller may change them
        return replay_pass(graphs, plan, ids, pos, slots, last, tables).clone()
    meta = AttnMeta(is_prefill=False, slots=runner.tensor(slots))
    hidden = engine.model.forward(
        runner.tensor(ids), runner.tensor(pos), meta, engine.cache.kv, _attention(engine, plan)
    )
    return engine.model.logits(hidden[runner.tensor(last)])


def _attention(engine: LLMEngine, plan: ReadsPlan) -> Attend:
    """The pass's attention, reading its plan: the Triton kernel on CUDA, the fused C kernel on a CPU,
    else torch's."""
    model, cache = engine.model, engine.cache
    tables = (model.cos, model.sin)
    heads = {"num_heads": model.num_heads, "num_kv_heads": model.cfg.num_kv_heads}
    if triton_attention.enabled(model.device, cache.kv.dtype):  # CUDA: one kernel a layer
        reads = triton_attention.hogwild_reads(plan, tables, model.device)
        return triton_attention.attention(reads, **heads, head_dim=model.head_dim, scale=model.attn_scale)
    if fused.enabled(model.device, cache.kv.dtype):  # the same test as the plain decode's
        fused_reads, rotations = fused.hogwild_reads(plan, tables)
        return fused.attention(fused_reads, **heads, scale=model.attn_scale, rotations=rotations)
    return torch_attention.attention(
        plan,
        tables,
        num_slots=cache.num_blocks * cache.block_size,
        **heads,
        head_dim=model.head_dim,
        scale=model.attn_scale,
        dtype=model.dtype,
    )


@dataclass(frozen=True, slots=True)
class Draw:
    """How one row samples: its session's settings, its worker's seed and step, greedy or not."""

    params: SamplingParams
    seed: int
    step: int
    greedy: bool


def sample_rows(
    runner: ModelRunner, logits: torch.Tensor, draws: list[Draw]
) -> list[tuple[int, float | None]]:
    """Each row's next token and its logprob."""
    temperatures = [0.0 if d.greedy else d.params.temperature for d in draws]
    batch = SampleBatch(
        temperature=runner.tensor(temperatures, torch.float32),
        top_p=runner.tensor([d.params.top_p for d in draws], torch.float32),
        top_k=runner.tensor([d.params.top_k for d in draws]),
        seeds=runner.tensor([d.seed for d in draws]),
        steps=runner.tensor([d.step for d in draws]),
        is_filtered=any(d.params.top_p < 1.0 or d.params.top_k > 0 for d in draws),
        is_greedy_only=all(t == 0.0 for t in temperatures),
        has_greedy=any(t == 0.0 for t in temperatures),
        num_top_logprobs=0,
        # only when asked for, as a plain request's are (a log-sum-exp of every row)
        wants_logprobs=any(d.params.logprobs for d in draws),
    )
    sampled = sample(logits, batch)
    logprobs: list[float | None] = [None] * len(draws) if sampled.logprobs is None else [*sampled.logprobs]
    return list(zip(sampled.token_ids, logprobs, strict=True))
