"""Fixtures for the engine tests: tiny random-init Llama and Qwen2 checkpoints, and SmolLM2."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from paragen.engine import loader  # noqa: E402

# Where the Hogwild! equivalence tests run the engine: "cuda" on a GPU machine (docs/hogwild.md);
# their references (HF transformers, float64 attention) always run on the CPU.
DEVICE = os.environ.get("PARAGEN_TEST_DEVICE", "cpu")
# On a CPU the Triton kernel's tests run it in Triton's interpreter, which Triton reads at import.
if DEVICE == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def smol_dir() -> Path:
    """SmolLM2-135M-Instruct as a safetensors checkpoint (converted from the GGUF once, then cached)."""
    try:
        loader.default_model_path()
    except Exception as exc:
        pytest.skip(f"default model not installed: {exc}")
    return loader.resolve(None)


def _tiny(
    tmp: Path, smol: Path, arch: str, *, max_positions: int = 512, heads: tuple[int, int, int] = (4, 2, 16)
) -> Path:
    """A random-init checkpoint; ``heads``: query heads, KV heads, head size."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(smol)
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=heads[0] * heads[2],
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=heads[0],
        num_key_value_heads=heads[1],
        max_position_embeddings=max_positions,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    if arch == "llama":
        rope = {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
            "rope_theta": 500000.0,
        }
        config = transformers.LlamaConfig(**common, rope_scaling=rope, rope_theta=500000.0)
        model = transformers.LlamaForCausalLM(config)
    else:
        # head_dim 24: a softmax scale that is not a power of two, so it is not folded into the weights
        config = transformers.Qwen2Config(**{**common, "hidden_size": 96}, rope_theta=10000.0)
        model = transformers.Qwen2ForCausalLM(config)
    with torch.no_grad():  # random biases, so the Qwen2 bias path is really checked
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0.0, 0.5)
            elif name.endswith("weight") and param.dim() == 2:  # logits of the same size at any width
                param.normal_(0.0, 0.2 * (64 / (heads[0] * heads[2])) ** 0.5)
    out = tmp / arch
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tokenizer_dir(request: pytest.FixtureRequest) -> Path:
    """The tiny models' tokenizer: SmolLM2's, or $PARAGEN_TEST_TOKENIZER (a folder of its tokenizer
    files, for a machine without the model's package: the GPU machine)."""
    given = os.environ.get("PARAGEN_TEST_TOKENIZER")
    return Path(given) if given else Path(request.getfixturevalue("smol_dir"))


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> Path:
    return _tiny(tmp_path_factory.mktemp("tiny"), tokenizer_dir, "llama")


@pytest.fixture(scope="session")
def tiny_qwen2(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> Path:
    return _tiny(tmp_path_factory.mktemp("tiny"), tokenizer_dir, "qwen2")


@pytest.fixture(scope="session")
def long_llama(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> Path:
    """A tiny Llama with room for 2k-token views and SmolLM2's attention shape (3 query heads a KV
    head, head size 64: the fused kernel's vector paths), for the steady-state Hogwild! test."""
    return _tiny(
        tmp_path_factory.mktemp("tiny"), tokenizer_dir, "llama", max_positions=2048, heads=(6, 2, 64)
    )


@pytest.fixture(params=["torch", "fused", "triton", "triton-eager"])
def attention_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's shared attentions, each reading the pass's plan (hogwild/reads.py): the Triton
    kernel (CUDA's: its decode passes replayed from CUDA graphs, or all run eagerly), the fused kernel
    (a CPU with a C compiler), and the torch one."""
    from paragen.engine.kernels import fused, triton_attention

    if request.param in ("triton", "triton-eager"):  # on a CPU in Triton's interpreter (no graphs)
        if request.param == "triton-eager" and DEVICE == "cpu":
            pytest.skip("CUDA graphs run on CUDA only: on a CPU the triton case is the eager one")
        monkeypatch.setenv("PARAGEN_CUDA_GRAPHS", "0" if request.param == "triton-eager" else "1")
        monkeypatch.setenv("PARAGEN_TRITON_ATTENTION", "interpret" if DEVICE == "cpu" else "1")
        if not triton_attention.enabled(torch.device(DEVICE), torch.float32):
            pytest.skip("Triton is not installed (a CPU also needs TRITON_INTERPRET=1 from the start)")
        long_views = "long_llama" in request.fixturenames  # the steady state: 1.5k-token views
        if DEVICE == "cpu" and long_views and os.environ.get("PARAGEN_TEST_TRITON") != "1":
            pytest.skip("the steady state in Triton's interpreter takes minutes: PARAGEN_TEST_TRITON=1")
        return
    monkeypatch.setenv("PARAGEN_TRITON_ATTENTION", "0")
    if request.param == "fused":
        monkeypatch.setenv("PARAGEN_FUSED_ATTENTION", "1")
        if not fused.enabled(torch.device(DEVICE), torch.float32):
            pytest.skip("the fused attention runs on a CPU with a C compiler only")
        return
    monkeypatch.setenv("PARAGEN_FUSED_ATTENTION", "0")


# The fused kernel's paths by what the CPU has: built for this CPU (with AVX512-BF16: the bf16
# products; without: what it has), for an AVX-512 CPU without BF16 (bf16 widened to fp32), and for
# an AVX2-only one (plain loops). Per build: its flags, and the CPU flags without which it cannot
# run or is the native build again (then it is skipped).
KERNEL_BUILDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "native": (("-march=native",), ()),
    "avx512-no-bf16": (("-march=native", "-mno-avx512bf16"), ("avx512f", "avx512_bf16")),
    "avx2": (("-march=x86-64-v3",), ("avx2", "avx512f")),
}


@pytest.fixture(params=list(KERNEL_BUILDS))
def kernel_build(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The fused kernel built as ``request.param`` says (its own library, beside the native one's)."""
    from paragen.engine.kernels import fused_library

    build, needs = KERNEL_BUILDS[request.param]
    if not set(needs) <= set(fused_library.cpu_flags().split()):
        pytest.skip(
            f"the {request.param} build is not distinct from the native one on this CPU, or cannot run"
        )
    rest = tuple(flag for flag in fused_library._FLAGS if not flag.startswith("-march"))
    monkeypatch.setattr(fused_library, "_FLAGS", (*build, *rest))
    monkeypatch.setenv("PARAGEN_FUSED_ATTENTION", "1")
    fused_library.kernel.cache_clear()
    yield request.param
    fused_library.kernel.cache_clear()
