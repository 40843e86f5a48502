"""Which model the engine runs: its name, its file and that file's sha256, for run records.

The hash is of the file that was named (the GGUF, or a checkpoint folder's safetensors, in name
order), kept in the cache folder's hash index (paragen.engine.cache_folder).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from paragen.engine import loader
from paragen.engine.cache_folder import file_sha256


def describe(target: str | None, model_dir: Path) -> dict[str, Any]:
    """Name, path, files and sha256 of the engine's model (``target`` None: the default SmolLM2)."""
    source = loader.source_path(target)
    if not source.exists():  # a hub id: the downloaded snapshot is the file that ran
        source = model_dir
    files = [source] if source.is_file() else sorted(source.glob("*.safetensors"))
    name = target if target is not None else f"SmolLM2-135M-Instruct ({loader.DEFAULT_PACKAGE})"
    return {
        "name": name,
        "path": str(source),
        "files": [f.name for f in files],
        "bytes": sum(f.stat().st_size for f in files),
        "sha256": combined_sha256(files),
    }


def combined_sha256(files: list[Path]) -> str | None:
    """sha256 of one file, or of the files' own sha256s in order; None when there are none."""
    digests = [file_sha256(f) for f in files]
    if not digests:
        return None
    if len(digests) == 1:
        return digests[0]
    return hashlib.sha256("".join(digests).encode()).hexdigest()
