"""A lean forward for Llama-, Qwen2- and Qwen3-family decoder-only models (Qwen3-MoE's MLP: moe.py).

Weights are plain tensors with Q/K/V and gate/up fused into one matmul each, so a
layer is a handful of large ops: eager HF modules spend most of a CPU decode step on
per-op overhead. Attention (``attention.py``) reads and writes the paged KV cache
(``cache.py``) through indices that the model runner prepares once per step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from paragen.engine.attention import (
    Attend,
    AttnMeta,
    decode_attention,
    prefill_attention,
    rope_,
)
from paragen.engine.kernels import fused, triton_attention
from paragen.engine.model_config import ModelConfig, rope_inv_freq
from paragen.engine.moe import mlp_weights, sparse_mlp


@dataclass(slots=True)
class Layer:
    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor
    in_norm: torch.Tensor
    post_norm: torch.Tensor
    # Qwen3: the query heads' norm weights, then the key heads', as [heads + kv_heads, head_dim]
    qk_norm: torch.Tensor | None = None
    # Qwen3-MoE's sparse layers: the router; gate_up and down then hold every expert's (moe.py)
    router: torch.Tensor | None = None


class Model:
    """The weights of one model and its forward pass."""

    def __init__(
        self,
        cfg: ModelConfig,
        tensors: Mapping[str, torch.Tensor],
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
        self.num_heads, self.head_dim = cfg.num_heads, cfg.head_dim
        self.norm_shape, self.norm_eps = (cfg.hidden_size,), cfg.rms_norm_eps
        # Chosen once: a decode step makes ~120 of these calls, so per-call Python work counts.
        self.linear: Linear = _packed_linear() if self.is_packed else F.linear

        def get(name: str) -> torch.Tensor:
            return tensors[name].to(device=self.device, dtype=dtype)

        self.embed = get("model.embed_tokens.weight")
        self.norm = get("model.norm.weight")
        self.lm_head = self.embed if cfg.tie_word_embeddings else get("lm_head.weight")
        self.layers = [self._layer(get, tensors, i) for i in range(cfg.num_layers)]
        self.num_weight_bytes = sum(
            t.numel() * t.element_size()
            for t in [self.lm_head, *(w for x in self.layers for w in (x.qkv, x.o, x.gate_up, x.down))]
        )
        if self.is_packed:
            self.lm_head = _pack(self.lm_head)
            for layer in self.layers:
                layer.qkv, layer.o = _pack(layer.qkv), _pack(layer.o)
                if layer.router is None:  # experts are taken one by one from their stacks, by F.linear
                    layer.gate_up, layer.down = _pack(layer.gate_up), _pack(layer.down)
        max_pos = cfg.max_position_embeddings
        freqs = torch.outer(torch.arange(max_pos, dtype=torch.float32), rope_inv_freq(cfg))
        angles = torch.cat((freqs, freqs), dim=-1)
        self.cos = angles.cos().to(self.device, dtype)
        # rotate_half's sign lives in the sin table, so applying RoPE needs no neg or cat per layer.
        half = cfg.head_dim // 2
        self.sin = torch.cat((-angles.sin()[:, :half], angles.sin()[:, half:]), dim=-1).to(self.device, dtype)

    def _layer(
        self, get: Callable[[str], torch.Tensor], tensors: Mapping[str, torch.Tensor], index: int
    ) -> Layer:
        p = f"model.layers.{index}."
        qkv_names = [f"{p}self_attn.{x}_proj" for x in "qkv"]
        has_bias = f"{qkv_names[0]}.bias" in tensors
        qkv = torch.cat([get(f"{n}.weight") for n in qkv_names])
        bias = torch.cat([get(f"{n}.bias") for n in qkv_names]) if has_bias else None
        qk_norm = self._qk_norm(get, p) if self.cfg.qk_norm else None
        if self.is_scale_folded and qk_norm is None:
            num_q = self.cfg.num_heads * self.cfg.head_dim
            qkv[:num_q] *= self.cfg.head_dim**-0.5
            if bias is not None:
                bias[:num_q] *= self.cfg.head_dim**-0.5
        router, gate_up, down = mlp_weights(get, tensors, index, self.cfg.experts)
        return Layer(
            qkv=qkv,
            qkv_bias=bias,
            o=get(f"{p}self_attn.o_proj.weight"),
            gate_up=gate_up,
            down=down,
            in_norm=get(f"{p}input_layernorm.weight"),
            post_norm=get(f"{p}post_attention_layernorm.weight"),
            qk_norm=qk_norm,
            router=router,
        )

    def _qk_norm(self, get: Callable[[str], torch.Tensor], p: str) -> torch.Tensor:
        """Qwen3's per-head norm weights, one row per query head then per KV head. A folded softmax
        scale goes into the query rows: the norm would undo it in the projection's weights."""
        cfg = self.cfg
        q_norm, k_norm = get(f"{p}self_attn.q_norm.weight"), get(f"{p}self_attn.k_norm.weight")
        if self.is_scale_folded:
            q_norm = q_norm * cfg.head_dim**-0.5  # a power of two: exact
        return torch.cat([q_norm.expand(cfg.num_heads, -1), k_norm.expand(cfg.num_kv_heads, -1)])

    def forward(
        self,
        ids: torch.Tensor,
        pos: torch.Tensor,
        meta: AttnMeta,
        kv_cache: torch.Tensor,
        shared: Attend | None = None,
    ) -> torch.Tensor:
        """Hidden states [T, hidden] after the final norm; writes this step's K/V into the cache.

        ``shared`` is a Hogwild! session's attention (``hogwild/forward.py``): it rotates the queries
        itself, per segment of each view, so here only the keys are rotated (at ``pos``).
        """
        x = F.embedding(ids, self.embed)
        cos, sin = self.cos[pos].unsqueeze(1), self.sin[pos].unsqueeze(1)
        rope_from = 0
        if shared is not None:
            attend, rope_from = shared, self.num_heads
        elif meta.is_prefill:
            attend = prefill_attention(self.num_heads, self.attn_scale, meta)
        elif meta.triton_reads is not None:
            attend = triton_attention.attention(
                meta.triton_reads,
                num_heads=self.num_heads,
                num_kv_heads=self.cfg.num_kv_heads,
                head_dim=self.head_dim,
                scale=self.attn_scale,
            )
        elif meta.fused_reads is not None:  # the queries come rotated at their positions
            attend = fused.attention(
                meta.fused_reads,
                num_heads=self.num_heads,
                num_kv_heads=self.cfg.num_kv_heads,
                scale=self.attn_scale,
            )
        else:
            attend = decode_attention(
                meta,
                num_heads=self.num_heads,
                num_kv_heads=self.cfg.num_kv_heads,
                head_dim=self.head_dim,
                scale=self.attn_scale,
                dtype=self.dtype,
            )
        for layer, layer_kv in zip(self.layers, kv_cache, strict=True):
            x = self._block(x, layer, cos, sin, meta.slots, layer_kv, attend, rope_from)
        return self.rms_norm(x, self.norm)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden, self.lm_head, None).float()

    def rms_norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.norm_shape, w, self.norm_eps)

    def _block(
        self,
        x: torch.Tensor,
        layer: Layer,
        cos: torch.Tensor,
        sin: torch.Tensor,
        slots: torch.Tensor,
        kv: torch.Tensor,
        attend: Attend,
        rope_from: int,
    ) -> torch.Tensor:
        linear, nq = self.linear, self.num_heads
        h = self.rms_norm(x, layer.in_norm)
        qkv = linear(h, layer.qkv, layer.qkv_bias).view(x.shape[0], -1, self.head_dim)
        nqk = nq + kv.shape[0] // 2
        if layer.qk_norm is not None:  # before RoPE and before any attention reads the cache
            qk = qkv[:, :nqk]
            qk.copy_(F.rms_norm(qk, (self.head_dim,), None, self.norm_eps)).mul_(layer.qk_norm)
        rope_(qkv[:, rope_from:nqk], cos, sin)
        # [T, 2 * kv_heads, D] -> the cache's [2 * kv_heads, slots, D]: K and V in one write.
        kv.index_copy_(1, slots, qkv[:, nq:].transpose(0, 1))
        x = x + linear(attend(qkv, kv), layer.o, None)
        h = self.rms_norm(x, layer.post_norm)
        if layer.router is not None:
            assert self.cfg.experts is not None
            return x + sparse_mlp(h, layer.router, layer.gate_up, layer.down, self.cfg.experts)
        gate, up = linear(h, layer.gate_up, None).chunk(2, dim=-1)
        return x + linear(F.silu(gate) * up, layer.down, None)


Linear = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]


def _packed_linear() -> Linear:
    """A matmul with oneDNN-packed weights, the op overload bound once (see ``can_pack``)."""
    op = torch.ops.mkldnn._linear_pointwise.default

    def linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        out: torch.Tensor = op(x, w, bias, "none", [], "")
        return out

    return linear


def can_pack(device: torch.device, dtype: torch.dtype) -> bool:
    """oneDNN's prepacked weights: a small-batch CPU matmul streams them faster than a plain one.

    A plain fp32 ``F.linear`` goes to MKL, which repacks the whole weight on every call: at 8 rows on
    2 AVX2 cores a 0.5B model's step took 2.7x as long as with the weights packed once (docs/engine.md).
    """
    has_op = hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
    has_mkldnn: bool = torch.backends.mkldnn.is_available()  # type: ignore[no-untyped-call]
    # oneDNN refuses to pack bf16 weights without AVX-512 (bw, vl, dq): an AVX2-only CPU raises.
    has_avx512 = torch.backends.cpu.get_cpu_capability().startswith("AVX512")
    packs_dtype = dtype == torch.float32 or (dtype == torch.bfloat16 and has_avx512)
    return device.type == "cpu" and packs_dtype and has_mkldnn and has_op


def _pack(w: torch.Tensor) -> torch.Tensor:
    packed: torch.Tensor = torch.ops.mkldnn._reorder_linear_weight(
        w, 8
    )  # the batch-size hint; any batch works
    return packed
