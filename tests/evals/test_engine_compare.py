"""A report over two real engine runs (SmolLM2 on CPU, a few arith problems, few tokens)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evals.cli import app

pytest.importorskip("torch")


def _model_installed() -> bool:
    try:
        from paragen.engine import loader

        loader.default_model_path()
    except Exception:
        return False
    return True


pytestmark = pytest.mark.skipif(not _model_installed(), reason="the engine's default model is not installed")
runner = CliRunner()


def test_two_engine_runs_side_by_side(tmp_path: Path) -> None:
    base = ["eval", "-t", "arith", "-s", "single,majority", "--n", "2", "--backend", "engine", "--limit", "3",
            "--max-tokens", "24", "--no-progress", "--no-plot"]  # fmt: skip
    for name, seeds in (("s01", "0,1"), ("s2", "2")):
        result = runner.invoke(app, [*base, "--seeds", seeds, "--out", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
    args = ["report", str(tmp_path / "s01"), str(tmp_path / "s2"), "--format", "json", "--pairs", "all"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [(r["folder"], r["seeds"], r["num_problems"]) for r in report["summary"]] == [
        ("s01", 2, 6), ("s01", 2, 6), ("s2", 1, 3), ("s2", 1, 3)
    ]  # fmt: skip
    assert len(report["paired"]) == 6  # 4 settings of one task: every pair
    cross = [r for r in report["paired"] if r["a"] == "single n=1 @s01" and r["b"] == "single n=1 @s2"]
    assert cross and cross[0]["units"] == 3  # seed 0 of s01 against seed 2 of s2, problem by problem
    for row in report["paired"]:
        assert 0 < row["mcnemar_p"] <= 1 and row["tokens_ratio"] > 0
    assert any(r["axis"] == "latency" for r in report["within_budget"])
