"""A run of a reasoning model: its records carry each trace's thinking apart from its answer, and
the report and the Pareto plot show the thinking tokens apart from the answer tokens."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from evals.cli import app
from paragen.backends.scripted import Script

runner = CliRunner()
SCRIPTS = [  # one per problem, in call order: a server's split thought, and one cut off while thinking
    Script(reasoning="six sevens are 42", text="So \\boxed{42}"),  # 4 thinking tokens, 2 answer
    Script(text="<think> maybe \\boxed{7} or", finish_reason="length"),  # 4 thinking tokens, no answer
]


def test_report_shows_thinking_apart_from_answer_tokens(tmp_path: Path) -> None:
    scripts = tmp_path / "scripts.jsonl"
    scripts.write_text("".join(s.model_dump_json() + "\n" for s in SCRIPTS))
    out = tmp_path / "run"
    args = ["eval", "-t", "arith", "-s", "single", "--backend", f"scripted:{scripts}", "--limit", "2"]
    result = runner.invoke(app, [*args, "--out", str(out), "--no-progress"])
    assert result.exit_code == 0, result.output
    records = [json.loads(line)["result"] for line in (out / "records.jsonl").read_text().splitlines()]
    traces = sorted((r["traces"][0] for r in records), key=lambda t: t["thinking"])
    assert [(t["thinking"], t["reasoning_tokens"], t["text"]) for t in traces] == [
        ("closed", 4, "So \\boxed{42}"),
        ("open", 4, ""),
    ]
    assert sorted(r["answer"] for r in records if r["answer"] is not None) == ["42"]  # not the 7
    data = json.loads(runner.invoke(app, ["report", str(out), "--format", "json"]).stdout)
    [row] = data["summary"]
    assert (row["reasoning_tokens"], row["answer_tokens"]) == (4.0, 1.0)  # means per problem
    md = runner.invoke(app, ["report", str(out), "--format", "md"]).stdout
    assert "think tok" in md and "answer tok" in md
    assert (out / "pareto.png").stat().st_size > 10_000  # with its thinking-tokens panel
