"""A lean forward for Llama- and Qwen2-family decoder-only models.

Weights are plain tensors with Q/K/V and gate/up fused into one matmul each, so a
layer is a handful of large ops: eager HF modules spend most of a CPU decode step on
per-op overhead. Attention reads and writes the paged KV cache (see ``cache.py``)
through flat slot indices that the model runner prepares once per step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from paragen.engine.loader import ModelConfig

SMALL_BATCH = 16  # decode batches up to this size compute attention in fp32 on CPU


@dataclass(slots=True)
class AttnMeta:
    """Where this step's keys go and what each query attends to (built by the model runner).

    Prefill: one sequence, causal over its own new tokens. Decode: one token per row; each row
    reads its blocks in view order, padded to the longest row, and ``mask`` hides the slots past
    its length. ``gather`` indexes a layer's cache seen as rows of one block of one head
    (``[2 * kv_heads * num_blocks, block_size * head_dim]``): for each head, each row's blocks.
    Gathering whole blocks moves contiguous 2 KB runs, about twice as fast as slot by slot.
    """

    is_prefill: bool
    slots: torch.Tensor  # [T] flat cache slot per new token
    block_size: int = 0
    gather: torch.Tensor | None = None  # [2 * kv_heads * B * blocks per row] decode only
    mask: torch.Tensor | None = None  # [B, 1, L] additive, decode only; None when no slot is padding


@dataclass(slots=True)
class Layer:
    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor
    in_norm: torch.Tensor
    post_norm: torch.Tensor


def rope_inv_freq(cfg: ModelConfig) -> torch.Tensor:
    """Inverse frequencies, with llama3 scaling when the config asks for it."""
    dim = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    scaling = cfg.rope_scaling or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "llama3":
        return _llama3_scale(inv, scaling).float()
    assert kind == "default", f"unsupported rope_type {kind!r}"
    return inv.float()


def _llama3_scale(inv: torch.Tensor, s: dict[str, float]) -> torch.Tensor:
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old_len = s["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old_len / low, inv / factor, inv)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(is_medium, smoothed, scaled)


class Model:
    """The weights of one model and its forward pass."""

    def __init__(
        self,
        cfg: ModelConfig,
        tensors: dict[str, torch.Tensor],
        dtype: torch.dtype,
        device: str,
        pack: bool = True,
    ):
        self.cfg = cfg
        self.dtype = dtype
        self.device = torch.device(device)
        self.is_packed = pack and can_pack(self.device, dtype)
        scale = cfg.head_dim**-0.5
        # A power-of-two softmax scale is folded into the query weights: exact, and one op less per layer.
        self.is_scale_folded = math.log2(scale).is_integer()
        self.attn_scale = 1.0 if self.is_scale_folded else scale

        def get(name: str) -> torch.Tensor:
            return tensors[name].to(device=self.device, dtype=dtype)

        self.embed = get("model.embed_tokens.weight")
        self.norm = get("model.norm.weight")
        self.lm_head = self.embed if cfg.tie_word_embeddings else get("lm_head.weight")
        self.layers = [self._layer(get, tensors, f"model.layers.{i}.") for i in range(cfg.num_layers)]
        self.num_weight_bytes = sum(
            t.numel() * t.element_size()
            for t in [self.lm_head, *(w for x in self.layers for w in (x.qkv, x.o, x.gate_up, x.down))]
        )
        if self.is_packed:
            self.lm_head = _pack(self.lm_head)
            for layer in self.layers:
                layer.qkv, layer.o = _pack(layer.qkv), _pack(layer.o)
                layer.gate_up, layer.down = _pack(layer.gate_up), _pack(layer.down)
        max_pos = cfg.max_position_embeddings
        freqs = torch.outer(torch.arange(max_pos, dtype=torch.float32), rope_inv_freq(cfg))
        angles = torch.cat((freqs, freqs), dim=-1)
        self.cos = angles.cos().to(self.device, dtype)
        # rotate_half's sign lives in the sin table, so applying RoPE needs no neg or cat per layer.
        half = cfg.head_dim // 2
        self.sin = torch.cat((-angles.sin()[:, :half], angles.sin()[:, half:]), dim=-1).to(self.device, dtype)

    def _layer(self, get: Callable[[str], torch.Tensor], tensors: dict[str, torch.Tensor], p: str) -> Layer:
        qkv_names = [f"{p}self_attn.{x}_proj" for x in "qkv"]
        has_bias = f"{qkv_names[0]}.bias" in tensors
        qkv = torch.cat([get(f"{n}.weight") for n in qkv_names])
        bias = torch.cat([get(f"{n}.bias") for n in qkv_names]) if has_bias else None
        if self.is_scale_folded:
            num_q = self.cfg.num_heads * self.cfg.head_dim
            qkv[:num_q] *= self.cfg.head_dim**-0.5
            if bias is not None:
                bias[:num_q] *= self.cfg.head_dim**-0.5
        return Layer(
            qkv=qkv,
            qkv_bias=bias,
            o=get(f"{p}self_attn.o_proj.weight"),
            gate_up=torch.cat([get(f"{p}mlp.gate_proj.weight"), get(f"{p}mlp.up_proj.weight")]),
            down=get(f"{p}mlp.down_proj.weight"),
            in_norm=get(f"{p}input_layernorm.weight"),
            post_norm=get(f"{p}post_attention_layernorm.weight"),
        )

    def forward(
        self,
        ids: torch.Tensor,
        pos: torch.Tensor,
        meta: AttnMeta,
        kv_cache: torch.Tensor,
    ) -> torch.Tensor:
        """Hidden states [T, hidden] after the final norm; writes this step's K/V into the cache."""
        x = F.embedding(ids, self.embed)
        cos, sin = self.cos[pos].unsqueeze(1), self.sin[pos].unsqueeze(1)
        for layer, layer_kv in zip(self.layers, kv_cache, strict=True):
            x = self._block(x, layer, cos, sin, meta, layer_kv)
        return self.rms_norm(x, self.norm)

    def linear(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if self.is_packed:
            out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(x, w, bias, "none", [], "")
            return out
        return F.linear(x, w, bias)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden, self.lm_head).float()

    def rms_norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), w, self.cfg.rms_norm_eps)

    def _block(
        self,
        x: torch.Tensor,
        layer: Layer,
        cos: torch.Tensor,
        sin: torch.Tensor,
        meta: AttnMeta,
        kv: torch.Tensor,
    ) -> torch.Tensor:
        cfg = self.cfg
        h = self.rms_norm(x, layer.in_norm)
        qkv = self.linear(h, layer.qkv, layer.qkv_bias).view(x.shape[0], -1, cfg.head_dim)
        nq = cfg.num_heads
        _rope_(qkv[:, : nq + cfg.num_kv_heads], cos, sin)
        # [T, 2 * kv_heads, D] -> the cache's [2 * kv_heads, slots, D]: K and V in one write.
        kv.index_copy_(1, meta.slots, qkv[:, nq:].transpose(0, 1))
        if meta.is_prefill:
            attn = _prefill_attn(qkv, nq, self.attn_scale)
        else:
            attn = _decode_attn(qkv, nq, kv, meta, self.attn_scale)
        x = x + self.linear(attn, layer.o)
        h = self.rms_norm(x, layer.post_norm)
        gate, up = self.linear(h, layer.gate_up).chunk(2, dim=-1)
        return x + self.linear(F.silu(gate) * up, layer.down)


def can_pack(device: torch.device, dtype: torch.dtype) -> bool:
    """oneDNN's prepacked bf16 weights: a small-batch CPU matmul streams them about 1.5-2x faster."""
    has_op = hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
    has_mkldnn: bool = torch.backends.mkldnn.is_available()  # type: ignore[no-untyped-call]
    return device.type == "cpu" and dtype == torch.bfloat16 and has_mkldnn and has_op


def _pack(w: torch.Tensor) -> torch.Tensor:
    packed: torch.Tensor = torch.ops.mkldnn._reorder_linear_weight(
        w, 8
    )  # the batch-size hint; any batch works
    return packed


def _rope_(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> None:
    """RoPE in place: rotate_half(x) * sin == swap_halves(x) * signed_sin, with swap_halves one flip."""
    swapped = x.view(*x.shape[:-1], 2, -1).flip(-2).view(x.shape)
    x.mul_(cos).addcmul_(swapped, signed_sin)


def _prefill_attn(qkv: torch.Tensor, nq: int, scale: float) -> torch.Tensor:
    # [T, H, D] -> [H, T, D]; GQA through enable_gqa keeps K/V unexpanded.
    heads = qkv.transpose(0, 1)
    nkv = (heads.shape[0] - nq) // 2
    q, k, v = heads[:nq], heads[nq : nq + nkv], heads[nq + nkv :]
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True, scale=scale)
    return out.transpose(0, 1).reshape(qkv.shape[0], -1)


def _decode_attn(qkv: torch.Tensor, nq: int, kv: torch.Tensor, meta: AttnMeta, scale: float) -> torch.Tensor:
    """One query token per row against its gathered context, as two batched matmuls.

    SDPA for a single query token is slow on CPU in bf16. Rows and KV heads share one batch
    axis (head-major, so the gathered cache needs no copy); each KV head's query heads are the
    rows of its matrix. Small batches run in fp32 on CPU, where oneDNN's tiny bf16 bmm costs
    about twice as much.
    """
    assert meta.gather is not None
    b, _, d = qkv.shape
    nkv = kv.shape[0] // 2
    group = nq // nkv
    dtype = torch.float32 if b <= SMALL_BATCH and qkv.device.type == "cpu" else qkv.dtype
    q = torch.empty(nkv, b, group, d, dtype=dtype, device=qkv.device)
    q.copy_(qkv[:, :nq].view(b, nkv, group, d).transpose(0, 1))  # one op: reorder and cast
    blocks = kv.view(-1, meta.block_size * d).index_select(0, meta.gather)
    context = blocks.to(dtype).view(2, nkv * b, -1, d)  # [K|V, heads * rows, L, D]
    scores = torch.bmm(q.view(nkv * b, group, d), context[0].transpose(1, 2))
    if scale != 1.0:
        scores.mul_(scale)
    if meta.mask is not None:
        scores.view(nkv, b, group, -1).add_(meta.mask)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(dtype)
    out = torch.bmm(probs, context[1]).view(nkv, b, group, d)
    attn = torch.empty(b, nkv, group, d, dtype=qkv.dtype, device=qkv.device)
    attn.transpose(0, 1).copy_(out)
    return attn.view(b, nq * d)
