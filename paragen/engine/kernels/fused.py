"""A fused attention over lists of cache slots, for the engine on a CPU (``paged_attention.c``).

The torch attentions gather every row's keys and values out of the paged cache, cast them, and
score them in batched matmuls padded to the longest row: a dozen operators and as many copies of
the context per layer. The kernel reads each key and value where it lies, with no padding, sums in
fp32: one call per layer. Each key is scored by a query of its own choosing (``key_query``), which
is how a Hogwild! view's segments, stored at their own positions, are read at shifts of their own
(one rotated query per shift: ``shared_fused.py``). Tokens that read one list of keys form a class
(``KeyClass``: a Hogwild! session's workers), whose keys the kernel's AVX512-BF16 path loads once
for all of them.

The source is compiled on first use, on the machine that runs it (``-march=native``), into
``cache_dir()/kernels`` (or a fresh private temporary folder when that is not ours to write) and
loaded with ctypes. Without a C compiler, or with ``PARAGEN_FUSED_ATTENTION=0``, the engine keeps
its torch attentions (also the only ones on CUDA).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import itertools
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
# key_slots, key_query, key_start, key_count, choice_start, query_base, query_count, class_tokens,
# class_start, num_classes, max_count, max_queries, max_class, num_threads, out, out_bf16 (see
# paged_attention.c)
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
    *[_P] * 9,
    *[_I] * 5,
    _P,
    _I,
]
# Tokens of one list attended together at most (a class's scratch and a thread's share of the work).
MAX_CLASS = 8


def enabled(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the engine's attention on this device and dtype goes through the kernel."""
    if device.type != "cpu" or dtype not in _DTYPES or os.environ.get("PARAGEN_FUSED_ATTENTION") == "0":
        return False
    return _kernel() is not None


@dataclass(frozen=True, slots=True)
class SlotPlan:
    """What each query token of a forward reads (int32, on the CPU), the same for every layer."""

    key_slots: torch.Tensor  # [K]: every class's keys, class after class
    key_query: torch.Tensor | None  # every token's choice of rotation per key, token after token (None: 0)
    key_start: torch.Tensor  # [T]: where token t's keys begin in key_slots
    key_count: torch.Tensor  # [T]: how many keys token t reads
    choice_start: torch.Tensor  # [T]: where token t's choices begin in key_query
    query_base: torch.Tensor  # [T]: token t's first rotation (a row of the rotation tables)
    query_count: torch.Tensor  # [T]: how many rotations of its query token t has
    class_tokens: torch.Tensor  # [T]: the tokens, class after class
    class_start: torch.Tensor  # [C + 1]: where each class's tokens begin in class_tokens
    max_count: int
    max_queries: int
    max_class: int


@dataclass(slots=True)
class KeyClass:
    """Tokens that read one list of cache slots (the first ``counts[j]`` of them), each choosing
    which of its rotations scores each key: a row's tokens, or the one-token rows of a session's
    workers, whose views hold the same segments in orders and at shifts of their own."""

    slots: array[int]  # int32, one order for every token of the class
    tokens: list[int]  # each token's place in the forward
    counts: list[int]
    choices: list[array[int]]  # int32, per token: its rotation for each key (tokens may share one)
    bases: list[int]  # per token: its first rotation
    num_queries: list[int]  # per token: its rotations


def plan(classes: list[KeyClass], num_tokens: int) -> SlotPlan:
    """The forward's plan (arrays joined in C: a 4-worker eval's pass holds ~32k choices, which Python
    lists took 3-4 ms a pass to gather). A class of more than MAX_CLASS tokens is attended in parts."""
    per_token = {name: [0] * num_tokens for name in ("start", "count", "choice", "base", "queries")}
    order: list[int] = []
    class_start = [0]
    choices: list[array[int]] = []
    choice_at: dict[int, int] = {}  # id of a choices array -> where it begins in key_query
    at = num_choices = 0
    for key_class in classes:
        for j, token in enumerate(key_class.tokens):
            chosen = key_class.choices[j]
            if id(chosen) not in choice_at:
                choice_at[id(chosen)] = num_choices
                num_choices += len(chosen)
                choices.append(chosen)
            per_token["start"][token] = at
            per_token["count"][token] = key_class.counts[j]
            per_token["choice"][token] = choice_at[id(chosen)]
            per_token["base"][token] = key_class.bases[j]
            per_token["queries"][token] = key_class.num_queries[j]
            order.append(token)
        for first in range(MAX_CLASS, len(key_class.tokens), MAX_CLASS):
            class_start.append(len(order) - len(key_class.tokens) + first)
        class_start.append(len(order))
        at += len(key_class.slots)
    return SlotPlan(
        key_slots=_joined(c.slots for c in classes),
        key_query=_joined(choices),
        key_start=_ints(per_token["start"]),
        key_count=_ints(per_token["count"]),
        choice_start=_ints(per_token["choice"]),
        query_base=_ints(per_token["base"]),
        query_count=_ints(per_token["queries"]),
        class_tokens=_ints(order),
        class_start=_ints(class_start),
        max_count=max(per_token["count"], default=0),
        max_queries=max(per_token["queries"], default=0),
        max_class=max((b - a for a, b in itertools.pairwise(class_start)), default=0),
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
    rows = torch.arange(len(tables), dtype=torch.int32)
    return SlotPlan(
        key_slots=slots.to(torch.int32),
        key_query=None,
        key_start=(torch.cumsum(counts, 0) - counts).to(torch.int32),
        key_count=counts,
        choice_start=torch.zeros(len(tables), dtype=torch.int32),
        query_base=torch.zeros(len(tables), dtype=torch.int32),
        query_count=torch.ones(len(tables), dtype=torch.int32),
        class_tokens=rows,
        class_start=torch.arange(len(tables) + 1, dtype=torch.int32),
        max_count=int(counts.max()),
        max_queries=1,
        max_class=1,
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
        None if slot_plan.key_query is None else slot_plan.key_query.data_ptr(),
        slot_plan.key_start.data_ptr(),
        slot_plan.key_count.data_ptr(),
        slot_plan.choice_start.data_ptr(),
        slot_plan.query_base.data_ptr(),
        slot_plan.query_count.data_ptr(),
        slot_plan.class_tokens.data_ptr(),
        slot_plan.class_start.data_ptr(),
        len(slot_plan.class_start) - 1,
        slot_plan.max_count,
        slot_plan.max_queries,
        slot_plan.max_class,
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
