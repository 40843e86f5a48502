#!/usr/bin/env bash
# Hogwild!'s CUDA check (docs/hogwild.md): the equivalence tests with the engine on the GPU, and
# benchmarks/hogwild.py there. Run on a GPU machine whose python3 has torch (CUDA) and transformers,
# from the repository root, with TOKENIZER naming a folder that holds SmolLM2-135M-Instruct's
# config.json and tokenizer files (its weights are not needed: the benchmark times a model of
# SmolLM2's shape with random weights, which costs what SmolLM2 costs).
set -euo pipefail
TOKENIZER=${TOKENIZER:?a folder with the config.json and tokenizer files of SmolLM2}
PY=${PY:-python3}
MODEL=${MODEL:-/tmp/smollm2-shaped}
DEVICE=${DEVICE:-cuda}  # cpu: a dry run of this script on a machine without a GPU
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$PY" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
"$PY" - "$TOKENIZER" "$MODEL" <<'PYTHON'
import sys
import torch
import transformers
source, out = sys.argv[1:]
torch.manual_seed(0)
config = transformers.AutoConfig.from_pretrained(source)
model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
model.save_pretrained(out)
transformers.AutoTokenizer.from_pretrained(source).save_pretrained(out)
print("random-weight model of SmolLM2's shape in", out)
PYTHON
tests=0
PARAGEN_TEST_DEVICE="$DEVICE" PARAGEN_TEST_TOKENIZER="$TOKENIZER" "$PY" -m pytest -q -p no:cacheprovider \
  tests/engine/test_shared_attention.py tests/engine/test_hogwild_steady.py || tests=$?
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PY" benchmarks/hogwild.py --device "$DEVICE" --model "$MODEL"
exit "$tests"  # the benchmark runs whatever the tests said; their verdict is the script's
