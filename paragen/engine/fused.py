"""A fused attention over lists of cache slots, for the engine on a CPU (``paged_attention.c``).

The torch attentions gather every row's keys and values out of the paged cache, cast them, and
score them in batched matmuls padded to the longest row: a dozen operators and as many copies of
the context per layer. The kernel reads each key and value where it lies, once per (token, KV head),
in fp32 whatever the cache's dtype, with no padding: one call per layer. Each key is scored by a
query of its own choosing (``key_query``), which is how a Hogwild! view's segments, stored at their
own positions, are read at shifts of their own (one rotated query per shift: ``shared_fused.py``).

The source is compiled on first use, on the machine that runs it (``-march=native``), into
``cache_dir()/kernels`` (or a fresh private temporary folder when that is not ours to write) and
loaded with ctypes. Without a C compiler, or with ``PARAGEN_FUSED_ATTENTION=0``, the engine keeps
its torch attentions (also the only ones on CUDA).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from paragen.engine.loader import cache_dir

log = logging.getLogger("paragen.engine")

SOURCE = Path(__file__).with_name("paged_attention.c")
_FLAGS = ("-O3", "-march=native", "-ffast-math", "-fopenmp", "-shared", "-fPIC")
_LIBS = ("-lmvec", "-lm")  # the vectorised expf that -ffast-math -fopenmp calls lives in libmvec
_DTYPES = (torch.float32, torch.bfloat16)  # of the cache and of the activations
_P, _I, _L = ctypes.c_void_p, ctypes.c_int, ctypes.c_long
# kv, kv_bf16, num_slots, num_kv_heads, group, head_dim, scale, qkv, qkv_bf16, qkv_row, rot_cos, rot_sin,
# key_slots, key_query, key_start, key_count, query_base, query_count, num_tokens, max_count,
# max_queries, num_threads, out, out_bf16 (see paged_attention.c)
_ARGTYPES: list[Any] = [
    _P,
    _I,
    _L,
    _I,
    _I,
    _I,
    ctypes.c_float,
    _P,
    _I,
    _L,
    _P,
    _P,
    *[_P] * 6,
    _I,
    _I,
    _I,
    _I,
    _P,
    _I,
]


def enabled(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the engine's attention on this device and dtype goes through the kernel."""
    if device.type != "cpu" or dtype not in _DTYPES or os.environ.get("PARAGEN_FUSED_ATTENTION") == "0":
        return False
    return _kernel() is not None


@dataclass(frozen=True, slots=True)
class SlotPlan:
    """What each query token of a forward reads (int32, on the CPU), the same for every layer."""

    key_slots: torch.Tensor  # [K]: every token's keys, token after token
    key_query: torch.Tensor  # [K]: which of its token's queries scores each key
    key_start: torch.Tensor  # [T]: where token t's keys begin in key_slots
    key_count: torch.Tensor  # [T]: how many keys token t reads
    query_base: torch.Tensor  # [T]: token t's first rotation (a row of the rotation tables)
    query_count: torch.Tensor  # [T]: how many rotations of its query token t has
    max_count: int
    max_queries: int


@dataclass(slots=True)
class RowKeys:
    """One row's keys in view order, and per token of the row what it reads of them."""

    slots: array[int]  # int32
    which: array[int]  # int32, per key: which of the token's rotations scores it
    counts: list[int]  # per token: how many of the row's keys, from the first, it reads
    bases: list[int]  # per token: its first rotation
    num_queries: int  # rotations per token


def plan(rows: list[RowKeys]) -> SlotPlan:
    """The forward's plan, rows in its token order (arrays joined in C: a 4-worker eval's pass
    holds ~32k keys, which Python lists took 3-4 ms a pass to gather)."""
    starts: list[int] = []
    counts: list[int] = []
    bases: list[int] = []
    num_queries: list[int] = []
    at = 0
    for row in rows:
        starts += [at] * len(row.counts)
        at += len(row.slots)
        counts += row.counts
        bases += row.bases
        num_queries += [row.num_queries] * len(row.counts)
    return SlotPlan(
        key_slots=_joined(row.slots for row in rows),
        key_query=_joined(row.which for row in rows),
        key_start=_ints(starts),
        key_count=_ints(counts),
        query_base=_ints(bases),
        query_count=_ints(num_queries),
        max_count=max(counts, default=0),
        max_queries=max(num_queries, default=0),
    )


def _joined(parts: Iterable[array[int]]) -> torch.Tensor:
    joined = array("i")
    for part in parts:
        joined += part
    return torch.frombuffer(joined, dtype=torch.int32) if joined else torch.zeros(0, dtype=torch.int32)


def decode_plan(tables: torch.Tensor, lengths: torch.Tensor, block_size: int) -> SlotPlan:
    """A plain decode's plan: row r reads its first ``lengths[r]`` slots through its block table
    (``tables`` [B, blocks], padded with any block), with its one query (rotated already)."""
    every = (tables.unsqueeze(2) * block_size + torch.arange(block_size)).view(len(tables), -1)
    slots = every[torch.arange(every.shape[1]) < lengths.unsqueeze(1)]  # row after row
    counts = lengths.to(torch.int32)
    return SlotPlan(
        key_slots=slots.to(torch.int32),
        key_query=torch.zeros(len(slots), dtype=torch.int32),
        key_start=(torch.cumsum(counts, 0) - counts).to(torch.int32),
        key_count=counts,
        query_base=torch.zeros(len(tables), dtype=torch.int32),
        query_count=torch.ones(len(tables), dtype=torch.int32),
        max_count=int(counts.max()),
        max_queries=1,
    )


def _ints(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


def attend(
    kv: torch.Tensor,
    qkv: torch.Tensor,
    slot_plan: SlotPlan,
    *,
    num_heads: int,
    num_kv_heads: int,
    scale: float,
    rotations: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """[T, heads * D] in ``qkv``'s dtype: each token's attention over its keys in this layer's cache.

    ``qkv`` [T, heads + 2 * kv_heads, D] (token t's raw query: its first ``heads`` rows); ``kv``
    [2 * kv_heads, slots, D]; ``rotations``: cos and signed-sin rows [N, D] fp32 that turn the
    queries (token t's r-th: row ``query_base[t] + r``), or None when they come rotated.
    """
    kernel = _kernel()
    assert kernel is not None and kv.is_contiguous() and qkv.is_contiguous()
    num_tokens, head_dim = len(slot_plan.key_count), qkv.shape[-1]
    out = torch.empty(num_tokens, num_heads * head_dim, dtype=qkv.dtype)
    cos, sin = (None, None) if rotations is None else (rotations[0].data_ptr(), rotations[1].data_ptr())
    status = kernel(
        kv.data_ptr(),
        kv.dtype == torch.bfloat16,
        kv.shape[1],
        num_kv_heads,
        num_heads // num_kv_heads,
        head_dim,
        scale,
        qkv.data_ptr(),
        qkv.dtype == torch.bfloat16,
        qkv.shape[1] * head_dim,
        cos,
        sin,
        slot_plan.key_slots.data_ptr(),
        slot_plan.key_query.data_ptr(),
        slot_plan.key_start.data_ptr(),
        slot_plan.key_count.data_ptr(),
        slot_plan.query_base.data_ptr(),
        slot_plan.query_count.data_ptr(),
        num_tokens,
        slot_plan.max_count,
        slot_plan.max_queries,
        torch.get_num_threads(),
        out.data_ptr(),
        out.dtype == torch.bfloat16,
    )
    if status != 0:
        raise MemoryError("the fused attention could not allocate its scratch")
    return out


@functools.cache
def _kernel() -> Callable[..., int] | None:
    """The compiled kernel, built once per process; None (logged once) where it cannot be built."""
    compiler = shutil.which(os.environ.get("CC") or "gcc") or shutil.which("cc")
    if compiler is None:
        log.warning("no C compiler found: the engine keeps its torch attention (slower on a CPU)")
        return None
    source = SOURCE.read_bytes()
    key = hashlib.sha256(source + " ".join((*_FLAGS, *_LIBS, platform.machine(), _cpu_flags())).encode())
    name = f"paged_attention-{key.hexdigest()[:16]}.so"
    folder = _own_folder(cache_dir() / "kernels")
    try:
        if folder is not None:
            function = _load(compiler, folder, name)
        else:  # a fresh folder of this process's own, removed once loaded (the library stays mapped)
            with tempfile.TemporaryDirectory(prefix="paragen-kernels-") as private:
                function = _load(compiler, Path(private), name)
    except OSError as exc:
        log.warning("the fused attention could not be loaded (%s): the engine keeps its torch attention", exc)
        return None
    if function is None:
        return None
    function.argtypes = _ARGTYPES
    function.restype = ctypes.c_int
    kernel: Callable[..., int] = function
    return kernel


def _load(compiler: str, folder: Path, name: str) -> Any:
    """The kernel's function from the library in ``folder`` (built there if need be), or None."""
    path = _built(compiler, folder, name)
    return None if path is None else ctypes.CDLL(str(path)).paged_attention


def _own_folder(folder: Path) -> Path | None:
    """``folder``, created if need be, when this user owns it and nobody else may write it."""
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        info = folder.stat()
    except OSError:
        return None
    return folder if info.st_uid == os.getuid() and not info.st_mode & 0o022 else None


def _built(compiler: str, folder: Path, name: str) -> Path | None:
    """The library in ``folder``, compiled there first unless it is already (written whole, renamed)."""
    path = folder / name
    if path.exists():
        return path
    partial = folder / f".{name}.{os.getpid()}.tmp"
    command = [compiler, *_FLAGS, str(SOURCE), "-o", str(partial), *_LIBS]
    try:
        subprocess.run(command, check=True, capture_output=True, text=True, timeout=120)
        os.replace(partial, path)
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", "") or exc
        log.warning("the fused attention did not compile (%s): the engine keeps its torch attention", detail)
        partial.unlink(missing_ok=True)
        return None
    return path


def _cpu_flags() -> str:
    """What -march=native depends on: a library built on one CPU is not loaded on another."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    return next((line for line in info.splitlines() if line.startswith("flags")), "")
