#!/usr/bin/env bash
# Builds llama.cpp's C++ `llama-server` and copies it to the path given as the one argument.
#
# Usage: tools/build_llama_server.sh OUTPUT_BINARY   (run from anywhere; uses the repo's .venv)
# Needs cmake and a C++ compiler (ninja where installed, else make); LLAMA_BUILD_JOBS sets the parallel jobs (default 2).
#
# Why the C++ server as well as llama-cpp-python's: only `llama-server` has llama.cpp's reasoning
# options (`--reasoning-format` sends thinking as `reasoning_content`, `--reasoning-budget` and a
# request's `thinking_budget_tokens` bound it); `python -m llama_cpp.server` has none of them. The
# sources are the llama.cpp that llama-cpp-python 0.3.36 vendors (its sdist, fetched with pip, the
# one way this build downloads anything), so both servers run the same llama.cpp. ggml is built with
# the instruction sets the CPU lists and never its AMX path (tools/ggml_cmake_args.py says why).
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 OUTPUT_BINARY" >&2
    exit 2
fi
output=$1
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python="$repo/.venv/bin/python"
version=0.3.36

work=$(mktemp -d "${TMPDIR:-/tmp}/llama-server-build.XXXXXX")
partial="$output.tmp.$$"
trap 'rm -rf "$work" "$partial"' EXIT

# The sdist only (--no-binary names it alone: pip still prepares its metadata, whose build
# requirements may come as wheels).
"$python" -m pip download -q --no-deps --no-binary llama-cpp-python "llama-cpp-python==$version" -d "$work"
tar -xzf "$work/llama_cpp_python-$version.tar.gz" -C "$work"
source_dir="$work/llama_cpp_python-$version/vendor/llama.cpp"

read -r -a ggml_args <<<"$("$python" "$repo/tools/ggml_cmake_args.py")"
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi  # else cmake's default, Unix Makefiles
cmake -S "$source_dir" -B "$work/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF "${ggml_args[@]}"
cmake --build "$work/build" --target llama-server -j "${LLAMA_BUILD_JOBS:-2}"

mkdir -p "$(dirname "$output")"
# Copied under a temporary name and renamed, so a failed copy leaves no half-written binary.
cp "$work/build/bin/llama-server" "$partial"
mv -f "$partial" "$output"
echo "llama-server built: $output"
