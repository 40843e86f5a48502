"""The paragen cache folder, and an index of the sha256 of the files hashed there (kept in it).

A file's hash is computed once and kept by (path, size, mtime): a file changed in place is hashed
again, and a model loaded a second time costs a stat, not a read.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

_HASHES = "model_hashes.json"
_CHUNK = 1 << 22


def cache_dir() -> Path:
    return Path(os.environ.get("PARAGEN_CACHE_DIR") or Path.home() / ".cache" / "paragen")


def file_sha256(path: Path) -> str:
    """The file's sha256, from the cache when its path, size and mtime are the ones hashed."""
    stat = path.stat()
    key = f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    cache = cache_dir() / _HASHES
    known = _read(cache)
    if key in known:
        return known[key]
    known[key] = sha256_of(path)
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


def sha256_of(path: Path) -> str:
    """The file's sha256, read now (no index)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
