"""benchmarks/engine.py's choice of models: the capable model measured after SmolLM2 where installed,
skipped with a line saying how to install it where not, and the llama.cpp child's own arguments."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from paragen.engine import loader

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
CAPABLE = "qwen2.5-coder-0.5b"


def _load(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # its siblings (engine_measure, baselines) by plain import
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModuleType:
    monkeypatch.setenv("PARAGEN_CACHE_DIR", str(tmp_path / "cache"))  # nothing installed there
    return _load("engine", monkeypatch)


def test_the_capable_model_is_measured_after_smollm2_by_default(bench: ModuleType) -> None:
    assert bench.CAPABLE == CAPABLE
    assert bench.also_models(bench.parse_args([])) == [CAPABLE]
    assert bench.also_models(bench.parse_args(["--also", "none"])) == []
    assert bench.also_models(bench.parse_args(["--also", ""])) == []
    # --model itself is not measured twice, nor a name given twice
    args = bench.parse_args(["--model", CAPABLE, "--also", f"{CAPABLE}, a.gguf,a.gguf"])
    assert bench.also_models(args) == ["a.gguf"]


def test_a_model_that_is_not_there_says_why(bench: ModuleType, tmp_path: Path) -> None:
    why = bench.missing(CAPABLE)
    assert why is not None and f"paragen model install {CAPABLE}" in why
    assert bench.missing(str(tmp_path / "absent.gguf")) == f"no file at {tmp_path / 'absent.gguf'}"
    present = tmp_path / "present.gguf"
    present.write_bytes(b"GGUF")
    assert bench.missing(str(present)) is None
    assert bench.gguf_of(str(present)) == present
    assert bench.gguf_of(str(tmp_path)) is None  # a checkpoint folder has no GGUF for llama.cpp


def test_the_default_model_s_gguf_is_the_one_llamacpp_runs(bench: ModuleType) -> None:
    try:
        default = loader.default_model_path()
    except Exception as exc:
        pytest.skip(f"default model not installed: {exc}")
    assert bench.gguf_of(None) == default


def test_a_skipped_model_is_a_line_and_null_in_the_json(
    bench: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    measured: list[str | None] = []

    def primary(target: str | None, args: Any) -> dict[str, Any]:
        measured.append(target)  # stands in for SmolLM2's minutes of figures
        return {"vs_llamacpp_n8": 1.0}

    monkeypatch.setattr(bench, "primary", primary)
    broken = tmp_path / "broken.gguf"  # there, but no GGUF: its load fails after the check
    broken.write_bytes(b"GGUF")
    bench.main(["--tokens", "1", "--also", f"{CAPABLE},{broken}"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert measured == [None]
    install = f"paragen model install {CAPABLE}"
    assert any(line.startswith(f"model {CAPABLE} skipped: ") and install in line for line in lines)
    assert any(line.startswith(f"model {broken} skipped: cannot convert GGUF") for line in lines)
    assert json.loads(lines[-1]) == {"vs_llamacpp_n8": 1.0, CAPABLE: None, str(broken): None}


def test_the_llamacpp_child_reads_its_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    child = _load("llamacpp_baseline", monkeypatch)
    tps, why = child.llamacpp_tps("/nonexistent/model.gguf", "a prompt", 1, 1, 1)
    assert tps is None
    if importlib.util.find_spec("llama_cpp") is None:
        assert why == "llama_cpp is not installed"
    else:  # the child got as far as llama.cpp itself, with the path it was given
        assert "does not exist: /nonexistent/model.gguf" in why
