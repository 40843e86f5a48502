"""Proof grading on scripted judges: the score parsing, MathArena's mean over judges, what a record
keeps, bad input, judges called concurrently, and an offline re-grade from the records alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from evals.cli import app
from evals.run.combos import build_combos
from evals.run.judging import Judge, aggregate, grade_proof, judge_params, read_score
from evals.run.records import RECORDS_FILE, RUN_FILE, EvalRecord, JudgeScore, read_records
from evals.run.runner import run_eval
from evals.run.spec import BackendSetup, EvalSpec, Execution, RunFolder, Sampling
from evals.tasks import Selection, get_task, load_task
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.types import Problem, SamplingParams, StrategyResult

runner = CliRunner()
BASE = [
    "-t",
    "proofs_mini",
    "--limit",
    "2",
    "-s",
    "single",
    "--backend",
    "scripted",
    "--no-progress",
    "--no-plot",
]


def _judge_file(folder: Path, name: str, text: str) -> str:
    path = folder / f"{name}.jsonl"
    path.write_text(json.dumps({"text": text}) + "\n")
    return f"scripted:{path}"


def _verdict(score: int | None) -> JudgeScore:
    return JudgeScore(
        judge="j", score=score, reasoning="", tokens=1, cause=None if score is not None else "none"
    )


@pytest.mark.parametrize(
    ("reply", "score", "cause"),
    [
        ("fine <score>7</score>", 7, None),
        ("<score>2</score> on second thought <SCORE> 4 </score>", 4, None),  # the last one counts
        ("no tag, 7/7", None, "the judge's reply has no <score>N</score>"),
        ("<score>9</score>", None, "the judge's score 9 is above 7"),
        ("<score>-1</score>", None, "the judge's reply has no <score>N</score>"),
    ],
)
def test_read_score(reply: str, score: int | None, cause: str | None) -> None:
    assert read_score(reply) == (score, cause)


@pytest.mark.parametrize(
    ("scores", "outcome", "mean"),
    [
        ([7, 3], "incorrect", 5.0),
        ([7, 7], "correct", 7.0),
        ([7, None], "correct", 7.0),
        ([None, None], "grader_error", None),
    ],
)
def test_the_judges_mean_as_matharena_takes_it(
    scores: list[int | None], outcome: str, mean: float | None
) -> None:
    grade = aggregate([_verdict(s) for s in scores], "x")
    assert (grade.outcome, grade.score, grade.correct) == (outcome, mean, outcome == "correct")
    assert grade.cause == ("none" if mean is None else None)


@pytest.mark.anyio
async def test_a_failing_judge_is_left_out_with_its_cause_and_no_proof_is_not_judged() -> None:
    problem = Problem(id="p", question="Prove 1 = 1.", meta={"guideline": "(7 points) any proof"})
    result = StrategyResult(strategy="single", problem_id="p", answer=None, text="Trivially, 1 = 1.")
    good = Judge("good", ScriptedBackend(["Fine. <score>7</score>"]))
    bad = Judge("bad", ScriptedBackend([Script(text="x", fail="http500")]))
    grade = await grade_proof([good, bad], problem, result, judge_params(64))
    assert (grade.outcome, grade.score) == ("correct", 7.0) and grade.judges is not None
    assert grade.judges[1].score is None and "500" in (grade.judges[1].cause or "")
    empty = StrategyResult(strategy="single", problem_id="p", answer=None, text=" ")
    assert (await grade_proof([good], problem, empty, judge_params(64))).outcome == "no_answer"
    assert isinstance(good.backend, ScriptedBackend) and good.backend.calls == 1


def _eval(tmp_path: Path, *judges: str) -> Result:
    args = ["eval", *BASE, "--out", str(tmp_path / "run")]
    for judge in judges:
        args += ["--judge", judge]
    return runner.invoke(app, args)


def test_two_judges_are_recorded_and_averaged_apart_from_the_strategys_tokens(tmp_path: Path) -> None:
    a = _judge_file(tmp_path, "a", "Complete and rigorous. <score>7</score>")
    b = _judge_file(tmp_path, "b", "A gap in step two. <score>2</score>")
    result = _eval(tmp_path, a, b)
    assert result.exit_code == 0, result.output
    records = read_records(tmp_path / "run")
    assert [r.problem.id for r in records] == ["odd-sum", "sqrt2-irrational"]
    for record in records:
        grade = record.grade
        assert (grade.outcome, grade.score, grade.correct, grade.gold) == ("incorrect", 4.5, False, None)
        assert grade.judges is not None
        assert [(j.judge, j.score, j.reasoning, j.tokens) for j in grade.judges] == [
            (a, 7, "Complete and rigorous. <score>7</score>", 4),
            (b, 2, "A gap in step two. <score>2</score>", 6),
        ]
        samples = [t for t in record.result.traces if t.kind == "sample"]
        usage = record.result.usage  # the judges' 10 tokens are not the strategy's
        assert usage.total_tokens == sum(t.completion_tokens for t in samples) and usage.judge_tokens == 0
        assert record.problem.meta["guideline"] and record.problem.meta["reference"]
    run = json.loads((tmp_path / "run" / RUN_FILE).read_text())
    assert run["judges"] == [a, b]


def _one_line_exit_2(result: Result, needle: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert needle in result.stderr and result.stderr.strip().count("\n") == 0, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("judges", "needle"),
    [
        ([], "task 'proofs_mini' is graded by judges: give --judge SPEC"),
        (["nope:x"], "unknown backend 'nope'"),
        (["scripted:/no/such/file.jsonl"], "no script file at '/no/such/file.jsonl'"),
    ],
)
def test_bad_judging_input_is_one_line_and_exit_2(tmp_path: Path, judges: list[str], needle: str) -> None:
    _one_line_exit_2(_eval(tmp_path, *judges), needle)
    assert not (tmp_path / "run" / RECORDS_FILE).exists()


def test_a_judge_on_a_task_graded_by_math_verify_is_refused(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["eval", "-t", "arith", "--limit", "1", "--backend", "scripted", "--judge", "scripted",
              "--out", str(tmp_path / "run"), "--no-progress"],
    )  # fmt: skip
    _one_line_exit_2(result, "--judge grades proof tasks; 'arith' is graded by math-verify")


def test_regrade_offline_gives_the_other_judges_scores_and_keeps_the_records(tmp_path: Path) -> None:
    assert _eval(tmp_path, _judge_file(tmp_path, "a", "<score>7</score>")).exit_code == 0
    run = tmp_path / "run"
    before = (run / RECORDS_FILE).read_bytes()
    other = _judge_file(tmp_path, "b", "Circular argument. <score>0</score>")
    result = runner.invoke(app, ["report", str(run), "--regrade", "--judge", other, "--format", "json"])
    assert result.exit_code == 0, result.output
    assert (run / RECORDS_FILE).read_bytes() == before  # nothing written over the records
    regraded = [
        EvalRecord.model_validate_json(line) for line in (run / "regrade.jsonl").read_text().splitlines()
    ]
    originals = read_records(run)
    assert [r.result for r in regraded] == [r.result for r in originals]  # no strategy call: the same results
    for record in regraded:
        assert record.grade.judges is not None
        assert [(j.judge, j.score) for j in record.grade.judges] == [(other, 0)]
        assert (record.grade.outcome, record.grade.score) == ("incorrect", 0.0)
    assert json.loads(result.stdout)["summary"][0]["accuracy"] == 0.0
    plain = runner.invoke(app, ["report", str(run), "--judge", other])
    _one_line_exit_2(plain, "--judge re-grades proofs: give it with --regrade")
    kept = runner.invoke(app, ["report", str(run), "--regrade", "--format", "json"])
    assert "2 proof records keep their judges' grades (give --judge to re-grade)" in kept.stderr
    assert json.loads(kept.stdout)["summary"][0]["accuracy"] == 1.0  # the first judge's 7s


@pytest.mark.anyio
async def test_judges_run_concurrently_across_problems(tmp_path: Path) -> None:
    task = get_task("proofs_mini")
    loaded = load_task(task, Selection(limit=3), source="bundled")
    spec = EvalSpec(
        task=task, problems=loaded.problems, data=loaded.source, combos=build_combos(["single"], [1]),
        backend=BackendSetup("scripted"), folder=RunFolder(tmp_path / "run"),
        sampling=Sampling(SamplingParams(max_tokens=64, seed=1)),
        execution=Execution(max_concurrent=3, progress=False, grader_workers=1), judges=["scripted"],
    )  # fmt: skip
    judge = ScriptedBackend([Script(text="<score>7</score>", first_delay=0.3)])
    records = await run_eval(spec, ScriptedBackend(), [Judge("scripted", judge)])
    assert [r.grade.outcome for r in records] == ["correct"] * 3
    streams = judge.streams
    assert len(streams) == 3
    assert max(s.opened for s in streams) < min(s.closed or 0.0 for s in streams)  # all three at once


def test_two_regrades_at_once_leave_one_whole_file(tmp_path: Path) -> None:
    """A second writer: two re-grades writing regrade.jsonl at the same time (threads, each many
    times) leave one of the two whole files, and no temporary file behind."""
    import threading

    from evals.report.regrade import REGRADE_FILE, write_regraded

    assert _eval(tmp_path, _judge_file(tmp_path, "a", "<score>7</score>")).exit_code == 0
    run = tmp_path / "run"
    records = read_records(run)
    versions = [
        records,
        [r.model_copy(update={"grade": r.grade.model_copy(update={"score": 3.0})}) for r in records],
    ]

    def write(version: list[EvalRecord]) -> None:
        for _ in range(50):
            write_regraded(run, version)

    writers = [threading.Thread(target=write, args=(v,)) for v in versions]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    text = (run / REGRADE_FILE).read_text()
    assert text in {"".join(r.to_line() for r in v) for v in versions}
    assert sorted(p.name for p in run.iterdir() if p.name.endswith(".tmp")) == []
