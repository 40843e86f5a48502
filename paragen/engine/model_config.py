"""What the forward needs of a model, read from its HF config.json: the architectures the engine
runs (and the reward-model heads the scorer runs), the shape numbers, and the RoPE frequencies."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from paragen.engine.moe import ExpertsConfig
from paragen.errors import ConfigError

SUPPORTED_ARCHS = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
}
# Bodies whose attention normalises each query and key head (RMSNorm over head_dim) before RoPE.
QK_NORM_ARCHS = frozenset({"qwen3", "qwen3_moe"})
# Reward models: the same bodies with a ``score.*`` head in place of lm_head. Only the scorer
# (paragen.scoring.engine) asks for these; the generation engine keeps refusing them.
REWARD_ARCHS = {
    "Qwen2ForProcessRewardModel": "qwen2",
    "Qwen2ForRewardModel": "qwen2",
    "Qwen2ForSequenceClassification": "qwen2",
    "Qwen2ForTokenClassification": "qwen2",
    "LlamaForSequenceClassification": "llama",
    "LlamaForTokenClassification": "llama",
}
HEAD_PREFIX = "score."
_CHECKPOINT_HINT = "give a complete HF checkpoint (its config.json as transformers saves it)"


@dataclass(slots=True, frozen=True)
class ModelConfig:
    """The numbers the forward needs, read from an HF config.json."""

    arch: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict[str, Any] | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool
    eos_token_ids: tuple[int, ...]
    qk_norm: bool = False
    experts: ExpertsConfig | None = None  # Qwen3-MoE's routing (moe.py)

    @classmethod
    def from_hf(
        cls, hf: dict[str, Any], families: Mapping[str, str] = SUPPORTED_ARCHS, *, source: str = "config.json"
    ) -> ModelConfig:
        """``families`` maps the architectures accepted to their body (REWARD_ARCHS for a scorer);
        a config that lacks a field the forward needs, or holds one of the wrong type, is a ConfigError
        naming ``source``."""
        try:
            return cls._read(hf, families)
        except ConfigError:
            raise
        except KeyError as exc:
            raise ConfigError(f"{source} has no {exc.args[0]!r}", hint=_CHECKPOINT_HINT) from exc
        except (TypeError, ValueError, ArithmeticError) as exc:
            problem = f"{type(exc).__name__}: {exc}"
            raise ConfigError(f"{source} holds an unusable value ({problem})", hint=_CHECKPOINT_HINT) from exc

    @classmethod
    def _read(cls, hf: dict[str, Any], families: Mapping[str, str]) -> ModelConfig:
        name = architecture(hf)
        if name not in families:
            raise ConfigError(f"unsupported architecture {name!r}", hint=f"use one of {sorted(families)}")
        arch = families[name]
        _refuse_unsupported_attention(hf, name)
        heads = int(hf["num_attention_heads"])
        eos = hf.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),))
        rope = hf.get("rope_scaling") or hf.get("rope_parameters")
        theta = float(hf.get("rope_theta") or (rope or {}).get("rope_theta") or 10000.0)
        return cls(
            arch=arch,
            vocab_size=int(hf["vocab_size"]),
            hidden_size=int(hf["hidden_size"]),
            intermediate_size=int(hf["intermediate_size"]),
            num_layers=int(hf["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(hf.get("num_key_value_heads") or heads),
            head_dim=int(hf.get("head_dim") or hf["hidden_size"] // heads),
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            rope_theta=theta,
            rope_scaling=rope,
            max_position_embeddings=int(hf.get("max_position_embeddings", 2048)),
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
            attention_bias=arch == "qwen2" or bool(hf.get("attention_bias", False)),
            eos_token_ids=eos_ids,
            qk_norm=arch in QK_NORM_ARCHS,
            experts=ExpertsConfig.from_hf(hf) if arch == "qwen3_moe" else None,
        )


def _refuse_unsupported_attention(hf: dict[str, Any], name: str) -> None:
    """Refuse what the forward would silently compute otherwise: windowed layers (every layer here
    attends to the whole context) and Qwen3's bias variant (its o_proj bias has no place here)."""
    if hf.get("use_sliding_window") or "sliding_attention" in (hf.get("layer_types") or ()):
        raise ConfigError(f"{name} with sliding-window attention is not supported (each layer attends fully)")
    if name.startswith("Qwen3") and hf.get("attention_bias"):
        raise ConfigError(f"{name} with attention_bias is not supported (no o_proj bias in the forward)")


def architecture(hf: dict[str, Any]) -> str:
    """The checkpoint's class name (config.json's first ``architectures`` entry; Llama if none)."""
    archs = hf.get("architectures") or ["LlamaForCausalLM"]
    return str(archs[0])


def rope_inv_freq(cfg: ModelConfig) -> torch.Tensor:
    """Inverse frequencies, with llama3 scaling when the config asks for it."""
    dim = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    scaling = cfg.rope_scaling or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "llama3":
        return _llama3_scale(inv, scaling).float()
    if kind == "dynamic":
        # Its frequencies depend on the sequence length, so a block's keys cannot be shifted by a rotation.
        raise ConfigError("dynamic NTK RoPE scaling is not supported (its frequencies change with length)")
    if kind != "default":
        raise ConfigError(f"unsupported rope_type {kind!r}", hint="supported: default, llama3")
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
