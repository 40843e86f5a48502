"""Qwen3-MoE's sparse MLP: a router picks each token's top-k experts, whose SwiGLU outputs are summed
with the router's probabilities as weights.

Only the experts some token of the step picked run, each over its own tokens: a decode step of one
row runs k of them per layer, not all. Which ones is known only once the router has run, so the
forward reads the choice back to the host every layer; that is why a model with experts is run
without CUDA graphs (``model_runner.py``), whose replays cannot branch on values they compute.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F


@dataclass(slots=True, frozen=True)
class ExpertsConfig:
    """How a Qwen3-MoE config routes: experts per sparse layer, how many a token uses, which layers."""

    num_experts: int
    per_token: int
    intermediate_size: int
    normalize: bool  # the top-k probabilities rescaled to sum to 1 (``norm_topk_prob``)
    layers: frozenset[int]  # the layers whose MLP is sparse; the others are dense

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> ExpertsConfig:
        # Hub checkpoints name the count num_experts; transformers 5 writes num_local_experts.
        num_experts = int(hf.get("num_experts") or hf.get("num_local_experts") or 0)
        dense = set(hf.get("mlp_only_layers") or ())
        step = int(hf.get("decoder_sparse_step") or 1)
        sparse = {
            i
            for i in range(int(hf["num_hidden_layers"]))
            if i not in dense and num_experts and (i + 1) % step == 0
        }
        return cls(
            num_experts=num_experts,
            per_token=int(hf["num_experts_per_tok"]),
            intermediate_size=int(hf["moe_intermediate_size"]),
            normalize=bool(hf.get("norm_topk_prob", False)),
            layers=frozenset(sparse),
        )


def mlp_weights(
    get: Callable[[str], torch.Tensor], tensors: Mapping[str, Any], layer: int, experts: ExpertsConfig | None
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """Layer ``layer``'s router (None: a dense MLP), gate and up projections, gate rows first, and
    down projection. A sparse layer's are every expert's, [E, 2 * I, hidden] and [E, hidden, I],
    read from per-expert tensors (as the hub stores them) or from transformers 5's fused ones."""
    p = f"model.layers.{layer}.mlp."
    if experts is None or layer not in experts.layers:
        return (
            None,
            torch.cat([get(f"{p}gate_proj.weight"), get(f"{p}up_proj.weight")]),
            get(f"{p}down_proj.weight"),
        )
    if f"{p}experts.gate_up_proj" in tensors:
        return get(f"{p}gate.weight"), get(f"{p}experts.gate_up_proj"), get(f"{p}experts.down_proj")
    gate_up = [
        torch.cat([get(f"{p}experts.{e}.{x}_proj.weight") for x in ("gate", "up")])
        for e in range(experts.num_experts)
    ]
    down = [get(f"{p}experts.{e}.down_proj.weight") for e in range(experts.num_experts)]
    return get(f"{p}gate.weight"), torch.stack(gate_up), torch.stack(down)


def sparse_mlp(
    h: torch.Tensor,
    router: torch.Tensor,
    gate_up: torch.Tensor,
    down: torch.Tensor,
    cfg: ExpertsConfig,
) -> torch.Tensor:
    """[T, hidden]: each token's top-k experts' outputs, weighted by its router probabilities."""
    probs = torch.softmax(F.linear(h, router), dim=-1, dtype=torch.float32)
    weights, chosen = probs.topk(cfg.per_token, dim=-1)
    if cfg.normalize:
        weights /= weights.sum(dim=-1, keepdim=True)
    weights = weights.to(h.dtype)
    out = torch.zeros_like(h)
    for expert in sorted(set(chosen.flatten().tolist())):  # ascending, as transformers sums them
        tokens, rank = (chosen == expert).nonzero(as_tuple=True)
        gate, up = F.linear(h[tokens], gate_up[expert]).chunk(2, dim=-1)
        y = F.linear(F.silu(gate) * up, down[expert])
        out.index_add_(0, tokens, y * weights[tokens, rank, None])
    return out
