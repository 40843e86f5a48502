"""The `eval` and `report` commands: bad input in one line, reports in every format, regrade, plots."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

import pytest
import typer
from evals_helpers import register_test_strategies
from typer.testing import CliRunner

from evals.cli import app, register
from evals.report.build import build_report

runner = CliRunner()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    register_test_strategies()
    out = tmp_path_factory.mktemp("run") / "r"
    args = [
        "eval",
        "-t",
        "arith",
        "-s",
        "t_single,t_vote",
        "--n",
        "1,3",
        "--backend",
        "scripted",
        "--limit",
        "6",
    ]
    result = runner.invoke(app, [*args, "--out", str(out), "--no-progress", "--seed", "2"])
    assert result.exit_code == 0, result.output
    return out


def test_eval_writes_records_and_the_plot(run_dir: Path) -> None:
    lines = (run_dir / "records.jsonl").read_text().splitlines()
    assert len(lines) == 6 * 3  # t_single once (no n), t_vote at n=1 and n=3
    assert (run_dir / "pareto.png").stat().st_size > 10_000
    info = json.loads((run_dir / "run.json").read_text())
    assert info["settings"]["backend"] == "scripted" and "math-verify" in info["versions"]
    assert info["schema"] == 2 and info["data"]["kind"] == "generated" and info["data"]["rows"] == 200


def test_run_json_has_the_sweeps_metrics_equal_to_its_records(run_dir: Path) -> None:
    metrics = json.loads((run_dir / "run.json").read_text())["metrics"]
    results = [json.loads(line)["result"] for line in (run_dir / "records.jsonl").read_text().splitlines()]
    done = {s: sum(r["strategy"] == s for r in results) for s in ("t_single", "t_vote")}
    assert metrics['paragen_runs_total{outcome="done",strategy="t_single"}'] == done["t_single"] == 6
    assert metrics['paragen_runs_total{outcome="done",strategy="t_vote"}'] == done["t_vote"] == 12
    usage = [r["usage"] for r in results]
    assert metrics['paragen_tokens_total{kind="generated"}'] == sum(u["total_tokens"] for u in usage) > 0
    assert metrics['paragen_tokens_total{kind="prompt"}'] == sum(u["prompt_tokens"] for u in usage)
    assert metrics['paragen_samples_total{kind="sample",status="ok"}'] == sum(u["num_samples"] for u in usage)
    assert metrics['paragen_run_latency_seconds_count{strategy="t_vote"}'] == 12
    assert metrics["paragen_runs_running"] == metrics["paragen_samples_running"] == 0


def test_report_formats(run_dir: Path) -> None:
    as_json = runner.invoke(app, ["report", str(run_dir), "--format", "json"])
    data = json.loads(as_json.stdout)
    assert {(r["strategy"], r["n"]) for r in data["summary"]} == {
        ("t_single", 1),
        ("t_vote", 1),
        ("t_vote", 3),
    }
    assert any(r["method"] == "maj@3" and r["label"] == "offline estimate" for r in data["offline"])
    rows = list(
        csv.reader(io.StringIO(runner.invoke(app, ["report", str(run_dir), "--format", "csv"]).stdout))
    )
    assert rows[0][:5] == ["task", "strategy", "n", "problems", "acc"] and len(rows) == 4
    assert data["runs"][0]["data"]["kind"] == "generated" and data["runs"][0]["data"]["rows_sha256"]
    md = runner.invoke(app, ["report", str(run_dir), "--format", "md"]).stdout
    assert "### Live runs" in md and "| t_vote | 3 |" in md and "matched total tokens" in md


def test_regrade_agrees_with_the_recorded_grades(run_dir: Path) -> None:
    assert build_report(run_dir, do_regrade=True)["summary"] == build_report(run_dir)["summary"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["-t", "nope"], "unknown task"),
        (["-t", "arith", "--n", "0"], "bad --n"),
        (["-t", "arith", "--n", "1,x"], "bad --n '1,x'"),
        (["-t", "arith", "--seeds", "0,x"], "bad --seeds '0,x'"),
        (["-t", "arith", "--shuffle", "-1"], "bad --shuffle -1: it must be at least 0"),
        (["-t", "arith", "-s", "no_such_strategy"], "unknown strategy"),
        (["-t", "arith", "--backend", "no_such_backend"], "unknown backend"),
        (["-t", "arith", "-O", "majority=3"], "majority: Extra inputs are not permitted"),
        (["-t", "arith", "-O", "majority.n=3"], "not among the chosen strategies"),
        (["-t", "arith", "--temperature", "-1"], "temperature"),
        (["-t", "arith", "--temperature", "nan"], "temperature: Input should be a finite number"),
        (["-t", "arith", "-O", "ffs.top_p=NaN", "-s", "ffs"], "top_p: Input should be a finite number"),
        (["-t", "arith", "--seed", "-1"], "seed: Input should be greater than or equal to 0"),
        (["-t", "aime25", "--offline"], "held out"),
    ],
)
def test_bad_input_ends_in_one_line_and_exit_code_2(tmp_path: Path, args: list[str], needle: str) -> None:
    backend = [] if "--backend" in args else ["--backend", "scripted"]
    result = runner.invoke(app, ["eval", *args, *backend, "--out", str(tmp_path / "x")])
    assert result.exit_code == 2, result.output
    assert needle in result.output and result.output.strip().count("\n") == 0


def test_report_of_a_folder_without_records(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 2 and "no records" in result.output


def test_report_of_a_runs_records_file_reports_its_run(run_dir: Path) -> None:
    by_folder = runner.invoke(app, ["report", str(run_dir), "--format", "json"])
    by_file = runner.invoke(app, ["report", str(run_dir / "records.jsonl"), "--format", "json"])
    assert by_file.exit_code == 0, by_file.output
    assert json.loads(by_file.stdout)["summary"] == json.loads(by_folder.stdout)["summary"]


def test_report_of_another_file_asks_for_the_run_folder(tmp_path: Path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("hello\n")
    result = runner.invoke(app, ["report", str(other)])
    assert result.exit_code == 2 and "give the run folder" in result.output


def test_register_adds_the_harness_commands() -> None:
    host = typer.Typer()
    register(host)
    assert {c.name for c in host.registered_commands} == {"eval", "report", "merge", "presets", "tasks"}


def _eval_args(out: Path) -> list[str]:
    return ["eval", "-t", "arith", "-s", "t_single", "--backend", "scripted", "--limit", "2",
            "--no-progress", "--out", str(out)]  # fmt: skip


def test_without_matplotlib_eval_says_so_and_keeps_its_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default plot is skipped with one line, not a traceback that ends the run."""
    register_test_strategies()
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what `import matplotlib` sees when absent
    result = runner.invoke(app, _eval_args(tmp_path / "r"))
    assert result.exit_code == 0, result.output
    assert "no plot: matplotlib is not installed (pip install 'paragen[plots]'" in result.stderr
    assert len((tmp_path / "r" / "records.jsonl").read_text().splitlines()) == 2
    assert not (tmp_path / "r" / "pareto.png").exists()


def test_without_matplotlib_an_asked_for_plot_is_refused_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_dir: Path
) -> None:
    register_test_strategies()
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    out = tmp_path / "r"
    for args in ([*_eval_args(out), "--plot"], ["report", str(run_dir), "--plot"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        (line,) = result.stderr.splitlines()
        assert "cannot write the plot: matplotlib is not installed" in line and "--no-plot" in line
    assert not out.exists()  # refused before anything was generated or written
