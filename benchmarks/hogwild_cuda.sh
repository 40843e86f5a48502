#!/usr/bin/env bash
# Hogwild!'s CUDA check (docs/hogwild.md): the equivalence tests with the engine on the GPU (the
# Triton kernel beside the torch attention), then benchmarks/hogwild_gpu.py (Qwen2 models of 7B's
# and 32B's shape, random weights drawn on the GPU). Run on a GPU machine whose python3 has torch
# (CUDA), Triton and transformers, from the repository root, with TOKENIZER naming a folder that holds
# SmolLM2-135M-Instruct's config.json and tokenizer files (the tiny test models' tokenizer).
set -uo pipefail
TOKENIZER=${TOKENIZER:?a folder with the config.json and tokenizer files of SmolLM2}
PY=${PY:-python3}
SHAPES=${SHAPES:-7b 32b}
VIEWS=${VIEWS:-2048 8192}
TESTS=${TESTS:-tests/engine/test_shared_attention.py tests/engine/test_hogwild_steady.py tests/engine/test_hogwild.py}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$PY" -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
tests=0
if [ -n "$TESTS" ]; then
  # shellcheck disable=SC2086
  PARAGEN_TEST_DEVICE=cuda PARAGEN_TEST_TOKENIZER="$TOKENIZER" "$PY" -m pytest -q -p no:cacheprovider $TESTS || tests=$?
fi
# shellcheck disable=SC2086
"$PY" benchmarks/hogwild_gpu.py --shapes $SHAPES --views $VIEWS
exit "$tests"  # the benchmark runs whatever the tests said; their verdict is the script's
