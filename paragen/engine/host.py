"""Process-level settings for running the engine on a CPU."""

from __future__ import annotations

import ctypes
import sys

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameter numbers
_KEEP_BYTES = 1 << 30


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed memory in the process instead of handing it back to the OS.

    A decode step allocates tens of MB of short-lived tensors (logits, probabilities: 12 MB
    each at 64 rows of a 49k vocabulary). With glibc's defaults, large blocks come from fresh
    mmaps and the freed top of the heap is returned, so every step page-faulted its
    temporaries back in: ~6000 faults, about a tenth of a 64-row step on this CPU. The cost:
    the process keeps up to 1 GiB of freed memory for reuse. Returns whether it applied (it
    does nothing outside glibc, e.g. on macOS or musl).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_TRIM_THRESHOLD, _KEEP_BYTES) and mallopt(_M_MMAP_THRESHOLD, _KEEP_BYTES))
