"""`paragen report` comparing settings and runs, and `--seeds` sweeps (scripted backend: no model)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from evals.cli import app
from evals.run.records import load_records, read_run_info

runner = CliRunner()
BASE = ["eval", "-t", "arith", "--backend", "scripted", "--no-progress", "--no-plot"]


def _eval(out: Path, *args: str) -> None:
    result = runner.invoke(app, [*BASE, *args, "--out", str(out)])
    assert result.exit_code == 0, result.output


def _report(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["report", *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def test_each_setting_is_compared_with_single_by_default(tmp_path: Path) -> None:
    _eval(tmp_path / "a", "-s", "single,majority", "--n", "3", "--limit", "4")
    report = _report(str(tmp_path / "a"))
    [row] = report["paired"]
    assert (row["a"], row["b"], row["problems"], row["resamples"]) == ("majority n=3", "single n=1", 4, 2000)
    assert row["diff_low"] <= row["diff"] <= row["diff_high"] and 0 < row["mcnemar_p"] <= 1
    every = _report(str(tmp_path / "a"), "--pairs", "all", "--baseline", "majority")
    assert len(every["paired"]) == 1


def test_a_missing_default_baseline_falls_back_aloud_and_an_unknown_one_is_refused(tmp_path: Path) -> None:
    _eval(tmp_path / "a", "-s", "majority", "--n", "2,3", "--limit", "2")
    result = runner.invoke(app, ["report", str(tmp_path / "a"), "--format", "json"])
    assert result.exit_code == 0
    assert "no 'single' setting; each setting is compared with 'majority n=2'" in result.output
    bad = runner.invoke(app, ["report", str(tmp_path / "a"), "--baseline", "nope"])
    assert bad.exit_code == 2 and len(bad.output.strip().splitlines()) == 1
    assert "unknown baseline 'nope'" in bad.output and "majority n=2" in bad.output


def test_runs_side_by_side_keep_their_common_problems(tmp_path: Path) -> None:
    _eval(tmp_path / "a", "-s", "single", "--limit", "5", "--seed", "1")
    _eval(tmp_path / "b", "-s", "single,majority", "--n", "2", "--limit", "3", "--temperature", "0.2")
    result = runner.invoke(app, ["report", str(tmp_path / "a"), str(tmp_path / "b"), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert "a: 5 problems, restricted to the 3 all runs share" in result.output
    report = json.loads(result.stdout)
    assert [(r["folder"], r["num_problems"]) for r in report["summary"]] == [("a", 3), ("b", 3), ("b", 3)]
    assert [(r["a"], r["b"]) for r in report["paired"]] == [("single n=1 @b", "single n=1 @a"),
                                                         ("majority n=2 @b", "single n=1 @a")]  # fmt: skip
    assert [r["seeds"] for r in report["runs"]] == [[1], [None]]


def test_runs_with_no_common_problem_are_refused_in_one_line(tmp_path: Path) -> None:
    _eval(tmp_path / "a", "-s", "single", "--limit", "2")
    _eval(tmp_path / "b", "-s", "single", "--limit", "2", "--offset", "2")
    result = runner.invoke(app, ["report", str(tmp_path / "a"), str(tmp_path / "b")])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "have no problem in common" in result.output


def test_seeds_run_the_sweep_once_per_seed_and_resume_per_seed(tmp_path: Path) -> None:
    out = tmp_path / "s"
    _eval(out, "-s", "single,majority", "--n", "2", "--limit", "3", "--seeds", "0,1")
    assert len(load_records(out).records) == 2 * 2 * 3
    _eval(out, "-s", "single,majority", "--n", "2", "--limit", "3", "--seeds", "0,1,2", "--resume")
    records = load_records(out).records
    assert len(records) == 3 * 2 * 3  # seeds 0 and 1 kept, only seed 2 ran
    assert {r.sampling.seed for r in records[12:]} == {2}
    assert read_run_info(out).seeds == [0, 1, 2] and read_run_info(out).settings.sampling.seed is None
    report = _report(str(out))
    assert [(r["seeds"], r["num_problems"]) for r in report["summary"]] == [(3, 9), (3, 9)]
    assert report["paired"][0]["units"] == 9 and report["paired"][0]["problems"] == 3


def test_seed_and_seeds_together_are_refused(tmp_path: Path) -> None:
    result = runner.invoke(app, [*BASE, "--seed", "1", "--seeds", "0,1", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "--seed and --seeds contradict" in result.output
    result = runner.invoke(app, [*BASE, "--seeds", "0,0", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "--seeds lists 0 twice" in result.output


def test_tables_name_their_statistics(tmp_path: Path) -> None:
    _eval(tmp_path / "a", "-s", "single,majority,ffs", "--n", "4", "--limit", "6")
    result = runner.invoke(app, ["report", str(tmp_path / "a"), "--format", "csv", "--csv-table", "paired"])
    assert result.exit_code == 0, result.output
    header = next(csv.reader(io.StringIO(result.stdout)))
    assert "diff A-B [95% paired bootstrap, 2000 resamples]" in header and "McNemar p (exact)" in header
    md = runner.invoke(app, ["report", str(tmp_path / "a"), "--format", "md", "--within-tokens", "50,500"])
    assert "offline maj@k from ffs's sample bank" in md.stdout
    assert "| arith | 50 tok |" in md.stdout and "| arith | 500 tok |" in md.stdout
    bad = runner.invoke(app, ["report", str(tmp_path / "a"), "--within-latency", "-1"])
    assert bad.exit_code == 2 and "bad --within-latency" in bad.output
