"""Model judge: an in-process judge model, e.g. THU-KEG/DeepPrune-Judge-4B given a local path.

Two heads are supported, since the published judge's head and input template could not be
confirmed here: ``classifier`` (a sequence-classification model; the score is the softmax
probability of ``positive_label``) and ``yes_no`` (a causal LM; the score is P(yes) against
P(no) for the next token). The pair is rendered with ``template`` (paragen's own wording;
replace it with the judge's training template when you have it). Runs in a worker thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import anyio

from paragen import RunContext
from paragen.errors import ConfigError
from strategies.deepprune.judges import scored_in_thread

TEMPLATE = (
    "Do these two partial reasoning traces reach the same final answer?\n\n"
    "Trace 1:\n{a}\n\nTrace 2:\n{b}\n\nAnswer yes or no."
)


class _Loaded:
    """The tokenizer and model behind a ModelJudge, loaded once."""

    def __init__(self, path: str, head: str) -> None:
        from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(path)
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        auto = AutoModelForSequenceClassification if head == "classifier" else AutoModelForCausalLM
        self.model = auto.from_pretrained(path).eval()
        if getattr(self.model.config, "pad_token_id", None) is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id


class ModelJudge:
    """Same-answer probability from a local judge model (classifier head or yes/no LM)."""

    name = "model"

    def __init__(
        self,
        path: str | None = None,
        head: Literal["classifier", "yes_no"] = "classifier",
        template: str = TEMPLATE,
        positive_label: int = 1,
        max_length: int = 1024,
        batch_size: int = 16,
    ) -> None:
        if not path:
            raise ConfigError(
                "the model judge needs path= (a local folder or hub id of the judge model)",
                hint="e.g. judge_options={'path': '/models/DeepPrune-Judge-4B'}",
            )
        if head not in ("classifier", "yes_no"):
            raise ConfigError(f"model judge: unknown head {head!r}", hint="classifier or yes_no")
        self.path, self.head, self.template = path, head, template
        self.positive_label = positive_label
        self.max_length, self.batch_size = max_length, batch_size
        self._loaded: _Loaded | None = None
        self._lock = anyio.Lock()

    async def same_answer(
        self, pairs: Sequence[tuple[str, str]], ctx: RunContext | None = None
    ) -> list[float]:
        return await scored_in_thread(self._lock, self.score, pairs)

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """Blocking: score the pairs in batches."""
        if self._loaded is None:
            self._loaded = _Loaded(self.path, self.head)
        texts = [self._render(a, b) for a, b in pairs]
        out: list[float] = []
        for i in range(0, len(texts), self.batch_size):
            out.extend(self._batch(texts[i : i + self.batch_size]))
        return out

    def _render(self, a: str, b: str) -> str:
        text = self.template.format(a=a, b=b)
        tok = self._loaded.tokenizer if self._loaded else None
        if self.head == "yes_no" and tok is not None and getattr(tok, "chat_template", None):
            messages = [{"role": "user", "content": text}]
            return str(tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
        return text

    def _batch(self, texts: list[str]) -> list[float]:
        import torch

        assert self._loaded is not None
        tok, model = self._loaded.tokenizer, self._loaded.model
        tok.padding_side = "left"  # the yes/no head reads the last position
        batch = tok(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        with torch.inference_mode():
            logits = model(**batch).logits
        if self.head == "classifier":
            return [float(p) for p in torch.softmax(logits.float(), dim=-1)[:, self.positive_label]]
        return self._yes_no(logits[:, -1, :].float(), tok)

    @staticmethod
    def _yes_no(last: Any, tok: Any) -> list[float]:
        import torch

        yes = tok.encode("yes", add_special_tokens=False)[0]
        no = tok.encode("no", add_special_tokens=False)[0]
        pair = torch.softmax(torch.stack([last[:, yes], last[:, no]], dim=-1), dim=-1)
        return [float(p) for p in pair[:, 0]]
