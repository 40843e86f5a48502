"""The machine the engine runs on: the dtype it computes in, and process-level settings for a CPU."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import torch

from paragen.errors import ConfigError

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameter numbers
_KEEP_BYTES = 1 << 30


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed memory in the process instead of handing it back to the OS.

    A decode step allocates tens of MB of short-lived tensors (logits, probabilities: 12 MB
    each at 64 rows of a 49k vocabulary). With glibc's defaults, large blocks come from fresh
    mmaps and the freed top of the heap is returned, so every step would page-fault its
    temporaries back in, thousands of faults a step. The cost: the process keeps up to 1 GiB
    of freed memory for reuse. Returns whether it applied (it
    does nothing outside glibc, e.g. on macOS or musl).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_TRIM_THRESHOLD, _KEEP_BYTES) and mallopt(_M_MMAP_THRESHOLD, _KEEP_BYTES))


def pick_dtype(name: str, device: str) -> torch.dtype:
    """bf16 where the hardware has it (CUDA, or a CPU with AVX-512 BF16 / AMX), else fp32."""
    if name != "auto":
        table = {
            "bfloat16": torch.bfloat16,
            "bf16": torch.bfloat16,
            "float32": torch.float32,
            "fp32": torch.float32,
        }
        if name not in table:
            raise ConfigError(f"unknown dtype {name!r}", hint=f"use auto or one of {sorted(table)}")
        return table[name]
    if device.startswith("cuda"):
        return torch.bfloat16
    return torch.bfloat16 if _cpu_has_bf16() else torch.float32


def _cpu_has_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags
