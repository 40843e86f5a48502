"""CMake arguments for llama.cpp's CPU backend, chosen from this machine's CPU with AMX off.

`pip install llama-cpp-python` builds ggml with GGML_NATIVE, whose `-march=native` turns on ggml's AMX
matrix multiply wherever the CPU lists AMX tiles. Inside some virtual machines that path is an illegal
instruction (the guest lists `amx_tile` but the first `tilezero` raises SIGILL), and with GGML_NATIVE on,
turning the three AMX options off does not help: native detection turns them back on. So the build names
each instruction set the CPU lists (the best one it can run: the engine benchmark's llama.cpp baseline
must not be weakened) and never AMX.

Prints one line for the CMAKE_ARGS environment variable. `python tools/ggml_cmake_args.py --explain`
prints the CPU flags read and the options chosen, one per line.
"""

from __future__ import annotations

import sys
from pathlib import Path

# ggml option -> the /proc/cpuinfo flags it needs (all of them). Order follows ggml's CMakeLists.
OPTIONS: dict[str, tuple[str, ...]] = {
    "GGML_SSE42": ("sse4_2",),
    "GGML_AVX": ("avx",),
    "GGML_AVX2": ("avx2",),
    "GGML_FMA": ("fma",),
    "GGML_F16C": ("f16c",),
    "GGML_BMI2": ("bmi2",),
    "GGML_AVX_VNNI": ("avx_vnni",),
    # ggml's AVX512 option compiles with -mavx512f -mavx512cd -mavx512vl -mavx512dq -mavx512bw.
    "GGML_AVX512": ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"),
    "GGML_AVX512_VBMI": ("avx512f", "avx512vbmi"),
    "GGML_AVX512_VNNI": ("avx512f", "avx512_vnni"),
    "GGML_AVX512_BF16": ("avx512f", "avx512_bf16"),
}
ALWAYS_OFF = ("GGML_NATIVE", "GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")


def cpu_flags(cpuinfo: str) -> set[str]:
    """The flags of the first processor listed in a /proc/cpuinfo text."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return set()


def cmake_options(flags: set[str]) -> dict[str, bool]:
    """Each ggml x86 option on or off for a CPU with these flags; AMX and native detection always off."""
    chosen = {name: all(flag in flags for flag in needs) for name, needs in OPTIONS.items()}
    chosen.update(dict.fromkeys(ALWAYS_OFF, False))
    return chosen


def cmake_args(flags: set[str]) -> str:
    return " ".join(f"-D{name}={'ON' if on else 'OFF'}" for name, on in cmake_options(flags).items())


def main(argv: list[str]) -> int:
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        # Not Linux: leave llama.cpp's own defaults (its native build) alone.
        print("")
        return 0
    flags = cpu_flags(cpuinfo.read_text())
    if "--explain" in argv:
        for name, on in cmake_options(flags).items():
            print(f"{name}={'ON' if on else 'OFF'}")
        return 0
    print(cmake_args(flags))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
