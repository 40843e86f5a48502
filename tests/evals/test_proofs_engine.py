"""A proof eval on the real engine (SmolLM2) judged by the same engine, then re-graded offline by
another judge from the records alone: the plumbing, not the model's skill (SmolLM2 seldom writes a
valid score, so a judge's verdict is a score or a grader_error with its cause)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evals.cli import app
from evals.run.records import RECORDS_FILE, EvalRecord, read_records

pytestmark = pytest.mark.timeout(600)  # a model load on 2 shared cores


def test_engine_proof_eval_then_offline_regrade(tmp_path: Path, smol_dir: Path) -> None:
    run = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        ["eval", "-t", "proofs_mini", "--limit", "2", "-s", "single", "-n", "1", "--backend", "engine",
         "--judge", "engine", "--max-tokens", "16", "--seed", "0", "--out", str(run),
         "--no-progress", "--no-plot"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    records = read_records(run)
    assert len(records) == 2
    for record in records:
        grade = record.grade
        assert grade.judges is not None and len(grade.judges) == 1
        verdict = grade.judges[0]
        assert verdict.judge == "engine" and verdict.reasoning and 0 < verdict.tokens <= 16
        assert (verdict.score is not None) == (verdict.cause is None)
        if verdict.score is None:
            assert grade.outcome == "grader_error" and grade.cause == verdict.cause
        else:
            assert grade.score == verdict.score
    judge = tmp_path / "judge.jsonl"
    judge.write_text(json.dumps({"text": "Complete. <score>7</score>"}) + "\n")
    before = (run / RECORDS_FILE).read_bytes()
    regrade = CliRunner().invoke(app, ["report", str(run), "--regrade", "--judge", f"scripted:{judge}"])
    assert regrade.exit_code == 0, regrade.output
    assert (run / RECORDS_FILE).read_bytes() == before
    lines = (run / "regrade.jsonl").read_text().splitlines()
    regraded = [EvalRecord.model_validate_json(line) for line in lines]
    assert [r.result for r in regraded] == [r.result for r in records]
    assert [(r.grade.outcome, r.grade.score) for r in regraded] == [("correct", 7.0)] * 2
