#!/usr/bin/env bash
# The same eval sweep on SmolLM2 three ways: paragen's engine, vLLM in-process, `vllm serve`.
# Needs `make setup setup-vllm`. Usage: evals/sweeps/three_way.sh [OUT_DIR] [LIMIT] [EVAL_ARGS...]
# Writes OUT_DIR/{engine,vllm,serve}/ run folders and prints `paragen report` for each. EVAL_ARGS go to
# every leg: `evals/sweeps/three_way.sh runs/three-way 48 --resume` adds problems 17-48 to a run of 16.
# The server's port is fixed (PORT, default 8765) because it is part of the serve leg's recorded settings.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-runs/three-way}
limit=${2:-16}
shift $(( $# < 2 ? $# : 2 ))
threads=${THREADS:-2}
model=$(.venv/bin/python -c "from paragen.engine.loader import resolve; print(resolve(None))")
sweep=(-t arith --limit "$limit" -s single,majority,ffs --n 4,8 --max-tokens 256 --temperature 0.7
       --seed 0 --offline --no-progress "$@")
# vLLM's CPU settings: KV cache in GiB, threads as the engine's, no core binding on a shared machine,
# float32 weights as the engine's (bf16, vLLM's default here, is several times slower on a CPU without
# native bf16: docs/openai-backend.md has the figures).
export VLLM_CPU_KVCACHE_SPACE=2 VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=$threads

.venv/bin/paragen eval "${sweep[@]}" -o "$out/engine" --backend-opt "threads=$threads"

.venv-vllm/bin/paragen eval "${sweep[@]}" -o "$out/vllm" -b "vllm:$model" \
    --backend-opt enforce_eager=true --backend-opt max_model_len=2048 --backend-opt max_num_seqs=64 \
    --backend-opt dtype=float32

port=${PORT:-8765}
.venv-vllm/bin/python -m vllm.entrypoints.openai.api_server --model "$model" --served-model-name smollm2 \
    --host 127.0.0.1 --port "$port" --max-model-len 2048 --max-num-seqs 64 --enforce-eager --dtype float32 \
    --enable-prompt-tokens-details --seed 0 --disable-uvicorn-access-log \
    --no-enable-chunked-prefill > "$out/vllm-serve.log" 2>&1 &  # seeded + chunked crashes vLLM 0.32's CPU worker
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
until curl -sf "http://127.0.0.1:$port/v1/models" > /dev/null; do
    kill -0 $server 2>/dev/null || { echo "vllm serve died: see $out/vllm-serve.log" >&2; exit 1; }
    sleep 2
done
.venv/bin/paragen eval "${sweep[@]}" -o "$out/serve" -b "openai:http://127.0.0.1:$port/v1" -m smollm2

for leg in engine vllm serve; do .venv/bin/paragen report "$out/$leg"; done
