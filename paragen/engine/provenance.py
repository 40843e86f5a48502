"""Which model the engine runs: its name, its file and that file's sha256, for run records.

The hash is of the file that was named (the GGUF, or a checkpoint folder's safetensors, in name
order), computed once and cached under the paragen cache by (path, size, mtime): a file changed
in place is hashed again, and a model loaded a second time costs a stat, not a read.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from paragen.engine import loader

_HASHES = "model_hashes.json"
_CHUNK = 1 << 22


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


def file_sha256(path: Path) -> str:
    """The file's sha256, from the cache when its path, size and mtime are the ones hashed."""
    stat = path.stat()
    key = f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    cache = loader.cache_dir() / _HASHES
    known = _read(cache)
    if key in known:
        return known[key]
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    known[key] = digest.hexdigest()
    _write(cache, known)
    return known[key]


def _read(cache: Path) -> dict[str, str]:
    try:
        data = json.loads(cache.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _write(cache: Path, known: dict[str, str]) -> None:
    """Atomically (a rename), so two processes hashing at once leave a whole file; a cache that
    cannot be written only costs the next load a hash."""
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}")
        tmp.write_text(json.dumps(known), encoding="utf-8")
        os.replace(tmp, cache)
    except OSError:
        pass
