"""The llama.cpp that `make setup` builds runs on every x86-64 CPU the project lands on.

ggml's AMX matrix multiply dies with SIGILL in virtual machines that list AMX tiles but do not let a
process use them, so the build never compiles it in (tools/ggml_cmake_args.py). Checked two ways:
no tile instruction in the installed libraries (a regression fails on any machine, AMX or not), and
one real forward pass in a child process that must exit cleanly. The C++ ``llama-server`` is
checked for tile instructions too.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from real_servers import llama_server_binary, missing

ROOT = Path(__file__).resolve().parents[2]
# Every AMX mnemonic objdump prints: tile configuration, loads and stores, and the dot products.
AMX_MNEMONICS = (
    "ldtilecfg", "sttilecfg", "tilerelease", "tilezero", "tileloadd", "tileloaddt1", "tilestored",
    "tdpbf16ps", "tdpfp16ps", "tdpbssd", "tdpbsud", "tdpbusd", "tdpbuud",
)  # fmt: skip


def _flags_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ggml_cmake_args", ROOT / "tools" / "ggml_cmake_args.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ggml_libraries() -> list[Path]:
    found = importlib.util.find_spec("llama_cpp")
    if found is None or found.origin is None:
        missing("llama-cpp-python is not installed", "make setup")
        raise AssertionError  # unreachable: missing() skips or fails
    libs = sorted(Path(found.origin).parent.glob("lib/libggml*.so*"))
    assert libs, f"no ggml library next to {found.origin}"
    return libs


def _amx_instructions(library: Path) -> list[str]:
    objdump = shutil.which("objdump")
    assert objdump is not None, "objdump (binutils, installed with gcc) is needed to read the library"
    command = [objdump, "-d", "--no-show-raw-insn", str(library)]
    listing = subprocess.run(command, capture_output=True, text=True)
    assert listing.returncode == 0, listing.stderr[-500:]
    found = []
    for line in listing.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) >= 2 and parts[1].split(" ", 1)[0] in AMX_MNEMONICS:
            found.append(parts[1].strip())
    return found


def test_the_installed_ggml_libraries_hold_no_amx_instruction() -> None:
    libraries = _ggml_libraries()
    assert any("ggml-cpu" in lib.name for lib in libraries), [lib.name for lib in libraries]
    for library in libraries:
        found = _amx_instructions(library)
        assert not found, f"{library.name}: {len(found)} AMX instructions, e.g. {found[:3]}"


def test_the_llama_server_binary_holds_no_amx_instruction() -> None:
    """The C++ server (tools/build_llama_server.sh) links ggml statically, from the same options."""
    binary = Path(llama_server_binary())
    found = _amx_instructions(binary)
    assert not found, f"{binary.name}: {len(found)} AMX instructions, e.g. {found[:3]}"


def test_one_forward_pass_exits_cleanly_in_a_child_process() -> None:
    """What dies first on a CPU that cannot run the build: a signal here, not a refused connection later."""
    _ggml_libraries()
    from paragen.engine import loader

    try:
        gguf = str(loader.default_model_path())
    except Exception as exc:
        pytest.skip(f"default model not installed: {exc}")
    code = (
        "import sys; from llama_cpp import Llama; "
        "llm = Llama(model_path=sys.argv[1], n_ctx=64, verbose=False); "
        "print(llm.create_completion('1 + 1 =', max_tokens=2, temperature=0)['choices'][0]['text'])"
    )
    child = subprocess.run([sys.executable, "-c", code, gguf], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, f"exit {child.returncode}: {child.stderr[-800:]}"


CPUS = {
    # /proc/cpuinfo flags of the machines the project lands on (the parts ggml's options read).
    "epyc-avx2": "sse4_2 avx avx2 fma f16c bmi2",
    "zen5": "sse4_2 avx avx2 fma f16c bmi2 avx_vnni avx512f avx512cd avx512vl avx512dq avx512bw "
    "avx512vbmi avx512_vnni avx512_bf16",
    "xeon-amx": "sse4_2 avx avx2 fma f16c bmi2 avx_vnni avx512f avx512cd avx512vl avx512dq avx512bw "
    "avx512vbmi avx512_vnni avx512_bf16 amx_tile amx_int8 amx_bf16",
}


@pytest.mark.parametrize("cpu", sorted(CPUS))
def test_the_build_names_what_the_cpu_lists_and_never_amx_or_native(cpu: str) -> None:
    flags = _flags_module()
    options = flags.cmake_options(set(CPUS[cpu].split()))
    never = ("GGML_NATIVE", "GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")
    assert not any(options[name] for name in never)
    assert options["GGML_AVX2"] and options["GGML_FMA"] and options["GGML_F16C"]
    has_avx512 = cpu != "epyc-avx2"
    assert options["GGML_AVX512"] is has_avx512 and options["GGML_AVX512_BF16"] is has_avx512


def test_a_cpu_without_every_avx512_part_gets_no_avx512() -> None:
    """ggml's AVX512 option compiles with F, CD, VL, DQ and BW together: a CPU lacking one gets AVX2."""
    options = _flags_module().cmake_options({"avx", "avx2", "fma", "f16c", "avx512f", "avx512cd"})
    assert not options["GGML_AVX512"] and options["GGML_AVX2"]


def test_the_args_read_the_first_processor_of_a_cpuinfo_text() -> None:
    flags = _flags_module()
    text = "processor\t: 0\nflags\t\t: avx avx2 amx_tile\n\nprocessor\t: 1\nflags\t\t: avx\n"
    assert flags.cpu_flags(text) == {"avx", "avx2", "amx_tile"}
    assert "-DGGML_AMX_TILE=OFF" in flags.cmake_args({"amx_tile"}).split()
