"""What a resume keeps in run.json, and --new-run keeping two settings apart in one folder."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from evals.cli import app
from evals.run.records import load_records, read_run_info

runner = CliRunner()
BASE = ["eval", "-t", "arith", "-s", "single", "--backend", "scripted", "--no-progress", "--no-plot"]


def test_a_plain_resume_keeps_the_run_id_and_adds_problems(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert runner.invoke(app, [*BASE, "--limit", "2", "--out", str(out)]).exit_code == 0
    first = read_run_info(out)
    more = ["--limit", "4", "-s", "single,majority", "--n", "2"]
    result = runner.invoke(app, [*BASE, *more, "--out", str(out), "--resume"])
    assert result.exit_code == 0, result.output
    after = read_run_info(out)
    assert after.run_id == first.run_id and after.started_at == first.started_at
    assert len(after.resumed_at) == 1 and len(after.problems) == 4
    assert [(s.name, s.n) for s in after.strategies] == [("single", 1), ("majority", 2)]
    assert {r.run_id for r in load_records(out).records} == {first.run_id}
    assert len(load_records(out).records) == 4 + 4  # single: two recorded, two new; majority: four


def test_new_run_records_other_settings_beside_the_first(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert runner.invoke(app, [*BASE, "--limit", "3", "--out", str(out)]).exit_code == 0
    args = [*BASE, "--limit", "3", "--temperature", "0.1", "--out", str(out), "--resume", "--new-run"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    info = read_run_info(out)
    assert info.settings.sampling.temperature == 0.1 and len(info.earlier) == 1
    assert info.earlier[0]["settings"]["sampling"]["temperature"] == 0.7
    records = load_records(out).records
    assert len(records) == 6 and len({r.settings_id for r in records}) == 2
    report = json.loads(runner.invoke(app, ["report", str(out), "--format", "json"]).stdout)
    assert [row["num_problems"] for row in report["summary"]] == [3, 3]  # two rows, never one mixed row
    assert len(report["runs"]) == 2 and len({row["run_id"] for row in report["summary"]}) == 2
