"""A representative part of the error matrix through `paragen eval` (in-process): every problem keeps its
record whether the budget is spent, the deadline passes or the backend fails.

A budget spent inside PDR's majority drafts, say, must not end the sweep with an ExceptionGroup,
exit 1 and no records. The faults come from the scripted backend's script files (`-b scripted:FILE`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evals.cli import app
from evals.cli.eval import EXIT_NO_RESULT
from evals.run.records import load_records

runner = CliRunner()
STRATEGIES = "single,majority,ffs,pdr,deepprune"
OPTIONS = ["-O", "pdr.draft_strategy=majority", "-O", "deepprune.judge=llm", "-n", "3"]
ANSWER = "Let me work this out. 2 + 3 = 5. The answer is \\boxed{5}."
SCENARIOS: dict[str, tuple[dict[str, object], list[str], str, int]] = {
    # script, extra flags, the stop_reason of every record, the exit code
    "budget": ({"text": ANSWER}, ["--max-total-tokens", "3"], "budget", 0),
    "deadline": ({"text": ANSWER * 20, "token_delay": 0.02}, ["--deadline", "0.15"], "deadline", 0),
    # every sample fails: the records hold no answer and grade as "error"; none is a result, so exit 1
    "fail_all": ({"text": ANSWER, "fail": "http500"}, [], "done", EXIT_NO_RESULT),
    "fail_mid": ({"text": ANSWER, "fail": "reset", "fail_after": 2}, [], "done", EXIT_NO_RESULT),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_every_problem_keeps_its_record(tmp_path: Path, scenario: str) -> None:
    script, flags, stop_reason, code = SCENARIOS[scenario]
    scripts = tmp_path / "scripts.jsonl"
    scripts.write_text(json.dumps(script) + "\n")
    args = ["eval", "-t", "arith", "-s", STRATEGIES, *OPTIONS, "-b", f"scripted:{scripts}", "--limit", "2"]
    result = runner.invoke(app, [*args, *flags, "-o", str(tmp_path / "r"), "--no-progress", "--no-plot"])
    assert result.exit_code == code, result.output
    records = load_records(tmp_path / "r").latest()
    assert len(records) == 5 * 2  # every strategy, every problem
    assert {r.result.stop_reason for r in records} == {stop_reason}
    assert all(r.result.answer is None and r.result.traces for r in records)
    if scenario.startswith("fail"):
        assert {r.grade.outcome for r in records} == {"error"}
