"""The fused attention's library: ``paged_attention.c`` compiled for this machine and loaded with ctypes.

The source is compiled on first use, on the machine that runs it (``-march=native``), into
``cache_dir()/kernels`` (or a fresh private temporary folder when that is not ours to write) and
loaded with ctypes. Its one argument is a ``Layer`` struct, mirrored here field for field; the
library reports the struct's offsets and the mirror is checked against them once, at load, so the
two cannot drift apart unnoticed. Without a C compiler the engine keeps its torch attentions.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from paragen.engine.cache_folder import cache_dir

log = logging.getLogger("paragen.engine")

SOURCE = Path(__file__).with_name("paged_attention.c")
_FLAGS = ("-O3", "-march=native", "-ffast-math", "-fopenmp", "-shared", "-fPIC")
_LIBS = ("-lmvec", "-lm")  # the vectorised expf that -ffast-math -fopenmp calls lives in libmvec
_P, _I, _L = ctypes.c_void_p, ctypes.c_int, ctypes.c_long


class Layer(ctypes.Structure):
    """One call of the kernel: one layer of a forward (``Layer`` in paged_attention.c, same order)."""

    _fields_ = [
        # this layer's cache [2 * kv_heads, slots, D], queries [T, heads + 2 * kv_heads, D], output
        ("kv", _P),
        ("num_slots", _L),
        ("kv_bf16", _I),
        ("qkv", _P),
        ("qkv_row", _L),
        ("qkv_bf16", _I),
        ("out", _P),
        ("out_bf16", _I),
        # the model's attention
        ("num_kv_heads", _I),
        ("group", _I),
        ("head_dim", _I),
        ("scale", ctypes.c_float),
        # what each token reads (``fused.FusedReads``), the same for every layer of a forward
        ("rot_cos", _P),
        ("rot_sin", _P),
        ("key_slots", _P),
        ("key_query", _P),
        ("key_start", _P),
        ("key_count", _P),
        ("choice_start", _P),
        ("query_base", _P),
        ("query_count", _P),
        ("class_tokens", _P),
        ("class_start", _P),
        ("num_classes", _I),
        ("max_count", _I),
        ("max_queries", _I),
        ("max_class", _I),
        ("num_threads", _I),
    ]


Kernel = Callable[[Any], int]  # called with ctypes.byref(layer): 0, or -1 when out of memory


@functools.cache
def kernel() -> Kernel | None:
    """The compiled kernel, built once per process; None (logged once) where it cannot be built."""
    compiler = shutil.which(os.environ.get("CC") or "gcc") or shutil.which("cc")
    if compiler is None:
        log.warning("no C compiler found: the engine keeps its torch attention (slower on a CPU)")
        return None
    source = SOURCE.read_bytes()
    key = hashlib.sha256(source + " ".join((*_FLAGS, *_LIBS, platform.machine(), cpu_flags())).encode())
    name = f"paged_attention-{key.hexdigest()[:16]}.so"
    folder = _own_folder(cache_dir() / "kernels")
    try:
        if folder is not None:
            library = _load(compiler, folder, name)
        else:  # a fresh folder of this process's own, removed once loaded (the library stays mapped)
            with tempfile.TemporaryDirectory(prefix="paragen-kernels-") as private:
                library = _load(compiler, Path(private), name)
    except OSError as exc:
        log.warning("the fused attention could not be loaded (%s): the engine keeps its torch attention", exc)
        return None
    if library is None:
        return None
    _check_layout(library)
    function = library.paged_attention
    function.argtypes = [ctypes.POINTER(Layer)]
    function.restype = ctypes.c_int
    loaded: Kernel = function
    return loaded


def _check_layout(library: Any) -> None:
    """Raises unless the library's ``Layer`` has this module's fields at the same offsets."""
    fields = [name for name, *_ in Layer._fields_]
    want = [ctypes.sizeof(Layer), *(getattr(Layer, name).offset for name in fields)]
    got = (ctypes.c_long * len(want))()
    count = library.paged_attention_layout(got, len(want))
    if count != len(want) or list(got) != want:
        raise RuntimeError(
            f"fused_library.Layer does not match the Layer of {SOURCE.name}: "
            f"size and offsets {want}, the library's {list(got)[:count]} ({count} values)"
        )


def _load(compiler: str, folder: Path, name: str) -> Any:
    """The library in ``folder`` (built there if need be), or None."""
    path = _built(compiler, folder, name)
    return None if path is None else ctypes.CDLL(str(path))


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


def cpu_flags() -> str:
    """What -march=native depends on: a library built on one CPU is not loaded on another."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    return next((line for line in info.splitlines() if line.startswith("flags")), "")
