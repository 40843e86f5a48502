"""A reward model on paragen's engine: model.py's Llama/Qwen2 body, then the checkpoint's score head.

Synchronous and thread-agnostic (the weights are only read); ``EngineScorer`` runs it in a worker
thread, one batch at a time. A batch is one packed prefill: the sequences' tokens end to end, each
attending causally to its own tokens only, over a scratch KV cache that nothing reads back.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from paragen.engine import loader, model_config
from paragen.engine.attention import Attend, AttnMeta, rope_
from paragen.engine.model import Model
from paragen.scoring.base import ScoreRequest, ScorerError, ScorerKind, reward_messages

# A token- or process-level head scores at step tags (a PRM); any other reads the last token (an ORM).
PRM_SUFFIXES = ("ProcessRewardModel", "TokenClassification")


@dataclass(slots=True, frozen=True)
class Encoded:
    """One request as the model sees it: its tokens and the positions whose head output is its score."""

    ids: list[int]
    picks: list[int]


@dataclass(slots=True, frozen=True)
class ScoreHead:
    """``score`` as Linear (a classification head) or Linear, ReLU, Linear (Qwen's reward heads)."""

    weights: list[tuple[torch.Tensor, torch.Tensor | None]]

    @property
    def num_labels(self) -> int:
        return int(self.weights[-1][0].shape[0])

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        x = hidden.float()  # the head runs in fp32: a few rows, and the scores are what is compared
        for i, (weight, bias) in enumerate(self.weights):
            x = F.linear(x if i == 0 else F.relu(x), weight, bias)
        return x


def load_head(head: dict[str, torch.Tensor], device: torch.device, where: Path) -> ScoreHead:
    """The ``score.*`` tensors (unprefixed) as a head, in fp32 on ``device``."""
    layers = [""] if "weight" in head else ["0.", "2."]  # Sequential(Linear, ReLU, Linear)
    if any(f"{layer}weight" not in head for layer in layers):
        raise ScorerError(f"no score head in {where} (no score.weight or score.0/score.2 tensors)")

    def get(name: str) -> torch.Tensor | None:
        return None if name not in head else head[name].to(device, torch.float32)

    return ScoreHead(
        [(head[f"{layer}weight"].to(device, torch.float32), get(f"{layer}bias")) for layer in layers]
    )


def head_kind(arch: str, where: Path) -> ScorerKind:
    if arch not in model_config.REWARD_ARCHS:
        raise ScorerError(
            f"no score head in {where}: {arch} is not a reward model"
            f" (scorers load {', '.join(sorted(model_config.REWARD_ARCHS))})"
        )
    return "prm" if arch.endswith(PRM_SUFFIXES) else "orm"


class RewardModel:
    """The loaded model, tokenizer and head; ``encode`` a request, ``score`` a batch of them."""

    def __init__(self, target: str, step_tag: str, dtype: torch.dtype, device: str) -> None:
        # A path or hub id that cannot be loaded raises the loader's ConfigError; a model without a
        # score head raises ScorerError (base.py: the run ends as a backend failure).
        path = loader.resolve(target)
        hf = loader.load_hf_config(path)
        self.kind = head_kind(model_config.architecture(hf), path)
        cfg = model_config.ModelConfig.from_hf(hf, model_config.REWARD_ARCHS)
        tensors = loader.load_tensors(path)
        self.head = load_head(loader.split_head(tensors), torch.device(device), path)
        self._check_labels(path)
        # A reward checkpoint has no lm_head: tie it to the embedding so Model builds (it is never used).
        body_cfg = dataclasses.replace(cfg, tie_word_embeddings=True)
        # Unpacked weights: packing would copy the embedding as a packed lm_head, and helps decode only.
        self.model = Model(body_cfg, tensors, dtype, device, pack=False)
        self.tokenizer: Any = loader.load_tokenizer(path)
        if not getattr(self.tokenizer, "chat_template", None):
            raise ScorerError(f"no chat template in {path}'s tokenizer")
        self.step_tag = step_tag
        self.tag_id = self._tag_id(path) if self.kind == "prm" else -1
        self.max_tokens = cfg.max_position_embeddings

    def _check_labels(self, path: Path) -> None:
        labels = self.head.num_labels
        if labels != 2 and (self.kind == "prm" or labels != 1):
            want = "2 labels" if self.kind == "prm" else "1 or 2 labels"
            raise ScorerError(f"the score head in {path} has {labels} labels; a {self.kind} needs {want}")

    def _tag_id(self, path: Path) -> int:
        ids = self.tokenizer.encode(self.step_tag, add_special_tokens=False)
        if len(ids) != 1:
            raise ScorerError(f"the step tag {self.step_tag!r} is not one token of {path}'s tokenizer")
        return int(ids[0])

    def encode(self, request: ScoreRequest) -> Encoded:
        """The chat's tokens (as the tokenizer renders it, no generation prompt) and where to score."""
        messages = reward_messages(request, self.kind, self.step_tag)
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
        # The template writes any BOS itself; letting the tokenizer add one more would shift every position.
        ids = [int(i) for i in self.tokenizer.encode(text, add_special_tokens=False)]
        if len(ids) > self.max_tokens:
            raise ScorerError(f"{len(ids)} tokens to score; the reward model takes {self.max_tokens}")
        if self.kind == "orm":
            return Encoded(ids, [len(ids) - 1])
        picks = [i for i, token in enumerate(ids) if token == self.tag_id]
        if len(picks) != len(request.steps):
            raise ScorerError(f"{len(picks)} step tags in the rendered chat for {len(request.steps)} steps")
        return Encoded(ids, picks)

    @torch.inference_mode()
    def score(self, batch: list[Encoded]) -> list[tuple[float, ...]]:
        """Each request's scores, from one packed forward of the whole batch."""
        hidden = packed_forward(self.model, [item.ids for item in batch])
        starts = itertools.accumulate((len(item.ids) for item in batch), initial=0)
        rows = [start + pick for start, item in zip(starts, batch, strict=False) for pick in item.picks]
        logits = self.head(hidden[torch.tensor(rows, device=hidden.device)])
        # Two labels: the probability of "correct" (class 1); one label: the raw reward.
        values = logits.softmax(-1)[:, 1] if self.head.num_labels == 2 else logits[:, 0]
        per_item = torch.split(values, [len(item.picks) for item in batch])
        return [tuple(part.tolist()) for part in per_item]


def packed_forward(model: Model, seqs: list[list[int]]) -> torch.Tensor:
    """Final hidden states [sum of lengths, hidden] of ``seqs``, run end to end as one prefill."""
    device, cfg = model.device, model.cfg
    lengths = [len(seq) for seq in seqs]
    total = sum(lengths)
    ids = torch.tensor([token for seq in seqs for token in seq], device=device)
    pos = torch.cat([torch.arange(n) for n in lengths]).to(device)
    # forward() writes each layer's K/V into the cache; attention here reads them from the layer's
    # own projections, so one scratch layer, seen by every layer (a stride-0 expand), is enough.
    scratch = torch.empty(2 * cfg.num_kv_heads, total, cfg.head_dim, dtype=model.dtype, device=device)
    kv = scratch.expand(cfg.num_layers, -1, -1, -1)
    meta = AttnMeta(is_prefill=True, slots=torch.arange(total, device=device))
    attend = packed_attention(model, pos, lengths)
    # ``shared`` is forward()'s hook for an attention that rotates its own queries (keys are rotated
    # by forward itself), which is what keeps the packed sequences apart without touching model.py.
    return model.forward(ids, pos, meta, kv, shared=attend)


def packed_attention(model: Model, pos: torch.Tensor, lengths: list[int]) -> Attend:
    """Causal attention within each packed sequence, the queries rotated here at ``pos``."""
    cos, sin = model.cos[pos].unsqueeze(1), model.sin[pos].unsqueeze(1)
    num_heads, scale = model.num_heads, model.attn_scale
    spans = list(itertools.pairwise(itertools.accumulate(lengths, initial=0)))

    def attend(qkv: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        rope_(qkv[:, :num_heads], cos, sin)
        heads = qkv.transpose(0, 1)  # [heads, T, D]
        nkv = (heads.shape[0] - num_heads) // 2
        q, k, v = heads[:num_heads], heads[num_heads : num_heads + nkv], heads[num_heads + nkv :]
        out = torch.cat(
            [
                F.scaled_dot_product_attention(
                    q[:, a:b], k[:, a:b], v[:, a:b], is_causal=True, enable_gqa=True, scale=scale
                )
                for a, b in spans
            ],
            dim=1,
        )
        return out.transpose(0, 1).reshape(qkv.shape[0], -1)

    return attend
