"""A backend that fails on every request gives no results: said at the end, exit 1, retried on resume."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from typer.testing import CliRunner

from evals.cli import app
from evals.run.records import load_records

runner = CliRunner()
BASE = ["eval", "-t", "arith", "--limit", "3", "-s", "single", "--no-progress", "--no-plot"]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the block ends: nothing listens there


def test_a_dead_server_is_one_error_before_anything_is_written(tmp_path: Path) -> None:
    """The backend is opened (its server probed) before the run folder is touched."""
    out = tmp_path / "run"
    spec = f"openai:http://127.0.0.1:{_closed_port()}/v1"
    args = [*BASE, "--backend", spec, "--backend-opt", "model=m", "--backend-opt", "max_retries=0"]
    first = runner.invoke(app, [*args, "--out", str(out)])
    assert first.exit_code == 2, first.output
    assert "connection failed" in first.stderr and len(first.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_errors_are_retried_on_resume_and_replaced_by_results(tmp_path: Path) -> None:
    script, out = tmp_path / "script.jsonl", tmp_path / "run"
    spec = ["--backend", f"scripted:{script}"]
    failing = {"text": "\\boxed{1}", "fail": "http500"}
    script.write_text(json.dumps(failing) + "\n" + json.dumps({"text": "So \\boxed{2}."}) + "\n")
    first = runner.invoke(app, [*BASE, *spec, "--out", str(out)])
    assert first.exit_code == 0, first.output  # some problems got a result
    assert "failed in the backend" in first.stderr
    outcomes = [r.grade.outcome for r in load_records(out).latest()]
    assert "error" in outcomes and len(outcomes) == 3

    script.write_text(json.dumps({"text": "So \\boxed{2}."}) + "\n")  # the server is back
    second = runner.invoke(app, [*BASE, *spec, "--out", str(out), "--resume"])
    assert second.exit_code == 0, second.output
    assert "failed in the backend" not in second.stderr
    latest = load_records(out).latest()
    assert len(latest) == 3 and "error" not in {r.grade.outcome for r in latest}
    report = runner.invoke(app, ["report", str(out), "--format", "json"])
    summary = json.loads(report.stdout)["summary"]
    assert [row["num_problems"] for row in summary] == [3]  # a retried error is replaced, not counted twice
