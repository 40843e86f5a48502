"""Shared fixtures: anyio on asyncio, offline switches so no test waits on a network, SmolLM2's
checkpoint and tiny random-init models dressed in its tokenizer, and an in-memory span exporter."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """paragen's tracing on for the test, its spans kept in memory to be read; off again after."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from paragen import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider)
    yield exporter
    tracing.disable()


@pytest.fixture(scope="session")
def smol_dir() -> Path:
    """SmolLM2-135M-Instruct as a safetensors checkpoint (converted from the GGUF once, then cached);
    the test is skipped where it is not installed."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from paragen.engine import loader

    try:
        loader.default_model_path()
    except Exception as exc:
        pytest.skip(f"default model not installed: {exc}")
    return loader.resolve(None)


# The shape every tiny model shares; a test's own fields go over it.
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "tie_word_embeddings": False}
TinyModel = Callable[..., Path]


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory, smol_dir: Path) -> TinyModel:
    """Builds a random-init checkpoint with SmolLM2's tokenizer and returns its folder::

        tiny_model(name, "LlamaForCausalLM", num_attention_heads=4, ...)

    ``model_class`` names a transformers class, built from its config class with TINY's shape and
    the given fields (``vocab_size`` and ``eos_token_id`` the tokenizer's; ``pad``: its pad token,
    else eos), after ``torch.manual_seed(seed)``. ``special_tokens`` are added to the tokenizer,
    ``tokens`` too as plain ones (kept in decoded text), ``chat_template`` replaces its template,
    ``init`` may change the weights, and ``save`` writes the model itself (default: save_pretrained).
    """

    def build(
        name: str,
        model_class: str,
        *,
        seed: int = 0,
        special_tokens: Sequence[str] = (),
        tokens: Sequence[str] = (),
        chat_template: str | None = None,
        pad: bool = False,
        init: Callable[[Any], None] | None = None,
        save: Callable[[Any, Path], None] | None = None,
        **fields: Any,
    ) -> Path:
        transformers: Any = importlib.import_module("transformers")
        torch: Any = importlib.import_module("torch")
        tokenizer = transformers.AutoTokenizer.from_pretrained(smol_dir)
        if special_tokens:
            tokenizer.add_special_tokens({"additional_special_tokens": list(special_tokens)})
        tokenizer.add_tokens(list(tokens))
        if chat_template is not None:
            tokenizer.chat_template = chat_template
        shape = {**TINY, "vocab_size": len(tokenizer), "eos_token_id": tokenizer.eos_token_id}
        if pad:
            shape["pad_token_id"] = (
                tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
            )
        cls = getattr(transformers, model_class)
        config = cls.config_class(**{**shape, **fields})
        torch.manual_seed(seed)
        model = cls(config)
        if init is not None:
            init(model)
        out: Path = tmp_path_factory.mktemp(name) / name
        (save or _save_pretrained)(model, out)
        tokenizer.save_pretrained(out)
        return out

    return build


def _save_pretrained(model: Any, out: Path) -> None:
    model.save_pretrained(out)


QWEN3_CHAT_TEMPLATE = Path(__file__).with_name("qwen3_chat_template.jinja")


def randomized(model: Any) -> None:
    """Every weight drawn at random, norms around 1: logits spread wide enough that greedy decoding
    has no near ties, and a norm weight applied in the wrong place changes them."""
    torch: Any = importlib.import_module("torch")
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 1:
                param.normal_(1.0, 0.3)
            else:  # logits of the same size at any width
                param.normal_(0.0, 0.2 * (64 / param.shape[-1]) ** 0.5)


@pytest.fixture(scope="session")
def tiny_qwen3_with(tiny_model: TinyModel) -> TinyModel:
    """A random-init Qwen3 (per-head q/k norms; head_dim 32, not hidden / heads) with Qwen3's
    ``<think>`` tokens and its chat template's thinking switch (or ``chat_template``); fields go over
    these. ``model_class`` may be Qwen3MoeForCausalLM."""

    def build(
        name: str, model_class: str = "Qwen3ForCausalLM", *, chat_template: str | None = None, **fields: Any
    ) -> Path:
        shape = {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32}
        return tiny_model(
            name,
            model_class,
            tokens=["<think>", "</think>"],
            chat_template=chat_template or QWEN3_CHAT_TEMPLATE.read_text(),
            init=randomized,
            **{**shape, "max_position_embeddings": 512, **fields},
        )

    return build


@pytest.fixture(scope="session")
def tiny_qwen3(tiny_qwen3_with: TinyModel) -> Path:
    return tiny_qwen3_with("qwen3")


@pytest.fixture(scope="session")
def tiny_qwen3_moe(tiny_qwen3_with: TinyModel) -> Path:
    """Qwen3-MoE: layer 0 sparse (8 experts, 2 a token, their probabilities renormalised, as in
    Qwen3-30B-A3B), layer 1 dense."""
    return tiny_qwen3_with(
        "qwen3_moe",
        "Qwen3MoeForCausalLM",
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        norm_topk_prob=True,
        mlp_only_layers=[1],
    )


@pytest.fixture(scope="session")
def weaver_dir(tiny_model: TinyModel, smol_dir: Path) -> Path:
    """A tiny Llama trained to write ThreadWeaver's fork/join grammar for one question (fork_weaver)."""
    from fork_weaver import teacher

    return tiny_model(
        "weaver", "LlamaForCausalLM", num_attention_heads=4, num_key_value_heads=2, init=teacher(smol_dir)
    )
