"""Tiny random-initialised reward models in HF format, for the scorer tests (engine and vLLM load them).

- a PRM shaped like Qwen2.5-Math-PRM (``Qwen2ForProcessRewardModel``: the Qwen2 body, then
  ``score`` = Linear(h, h), ReLU, Linear(h, 2)), scored at its ``<extra_0>`` step tags;
- an ORM (``Qwen2ForSequenceClassification`` with one label: a reward read at the last token).

Both use SmolLM2's tokenizer (and chat template) with ``<extra_0>`` added, since no Qwen weights
or tokenizer can be downloaded here. Weights are random, so scores mean nothing; they exist to be
equal across the engine, vLLM in-process and ``vllm serve``.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

# Untyped at the boundary, as the engine tests take it (its stubs disagree with its own kwargs).
transformers: Any = importlib.import_module("transformers")

STEP_TAG = "<extra_0>"
# Over the root conftest's tiny shape. head_dim 32: vLLM's CPU attention has no kernel for smaller
# heads (16 fails at the first request).
QWEN2: dict[str, Any] = {
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "max_position_embeddings": 1024,
    "rope_theta": 10000.0,
}
TinyModel = Callable[..., Path]  # the root conftest's tiny_model fixture


def _randomise(module: Any) -> None:
    with torch.no_grad():  # larger than HF's init, so scores spread and a wrong position shows
        for name, param in module.named_parameters():
            if name.endswith("bias"):
                param.normal_(0.0, 0.5)
            elif param.dim() == 2:
                param.normal_(0.0, 0.2)


def build_tiny_prm(tiny_model: TinyModel) -> Path:
    """A Qwen2ForProcessRewardModel checkpoint (safetensors, config, tokenizer)."""
    return tiny_model(
        "prm", "Qwen2Model", special_tokens=(STEP_TAG,), pad=True, init=_randomise, save=_save_prm,
        num_labels=2, **QWEN2,
    )  # fmt: skip


def _save_prm(body: Any, out: Path) -> None:
    """The Qwen2 body with a PRM's head (``score`` = Linear(h, h), ReLU, Linear(h, 2)) on it."""
    config = body.config
    hidden = config.hidden_size
    score = torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 2))
    _randomise(score)
    tensors = {f"model.{k}": v.contiguous() for k, v in body.state_dict().items()}
    tensors.update({f"score.{k}": v.contiguous() for k, v in score.state_dict().items()})
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    data = config.to_dict()
    data["architectures"] = ["Qwen2ForProcessRewardModel"]
    data["torch_dtype"] = "float32"
    (out / "config.json").write_text(json.dumps(data, indent=2))


def build_tiny_orm(tiny_model: TinyModel) -> Path:
    """A Qwen2ForSequenceClassification checkpoint with one label (an outcome reward)."""
    return tiny_model(
        "orm", "Qwen2ForSequenceClassification", seed=1, special_tokens=(STEP_TAG,), pad=True,
        init=_randomise, num_labels=1, **QWEN2,
    )  # fmt: skip


def hf_prm_step_scores(path: Path, text: str) -> list[float]:
    """The reference: P(class 1) at each step tag of ``text``, computed with transformers' Qwen2Model."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    config = transformers.Qwen2Config.from_pretrained(path)
    body = transformers.Qwen2Model(config)
    tensors = load_file(str(path / "model.safetensors"))
    body.load_state_dict({k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")})
    hidden = config.hidden_size
    score = torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 2))
    score.load_state_dict({k.removeprefix("score."): v for k, v in tensors.items() if k.startswith("score.")})
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids
    with torch.no_grad():
        probs = score(body(ids).last_hidden_state[0]).softmax(-1)[:, 1]
    tag = tokenizer.convert_tokens_to_ids(STEP_TAG)
    return [float(p) for p, t in zip(probs, ids[0], strict=True) if int(t) == tag]


def hf_orm_reward(path: Path, text: str) -> float:
    """The reference of an ORM: the one-label head's raw logit at the last token of ``text``."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.Qwen2ForSequenceClassification.from_pretrained(path, dtype=torch.float32)
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids
    with torch.no_grad():
        return float(model.score(model.model(ids).last_hidden_state[0, -1])[0])


def chat_text(path: Path, messages: list[dict[str, str]]) -> str:
    """``messages`` rendered as a reward model reads them: the chat template, no generation prompt."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    text: str = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    return text


def token_count(path: Path, text: str) -> int:
    return len(transformers.AutoTokenizer.from_pretrained(path)(text, add_special_tokens=False).input_ids)
