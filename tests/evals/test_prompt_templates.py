"""Prompt templates: the published wordings exactly, users' files, and what a sweep asks and records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evals.cli import app
from evals.run.combos import build_combos
from evals.run.prompts import get_template, prompt_setting
from evals.run.runner import run_eval
from evals.run.spec import BackendSetup, EvalSpec, Execution, RunFolder
from evals.tasks import Selection, get_task, load_task
from paragen.backends.scripted import ScriptedBackend
from paragen.errors import ConfigError
from paragen.prompts import MATH_SYSTEM, solve_messages, using_template

runner = CliRunner()
STEP = "Please reason step by step, and put your final answer within \\boxed{}."


def _chat(name: str) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in get_template(name).messages("What is {x}?")]


def test_named_templates_word_for_word() -> None:
    assert _chat("paragen") == [("system", MATH_SYSTEM), ("user", "What is {x}?")]
    assert _chat("matharena") == [("user", "Put your final answer within \\boxed{}.\n\nWhat is {x}?")]
    assert _chat("matharena-aime") == [
        (
            "user",
            "Put your final answer within \\boxed{}.\nThe answer is an integer between 0 and 999 inclusive."
            "\n\nWhat is {x}?",
        )
    ]
    assert _chat("deepseek-r1") == [("user", "What is {x}?\n" + STEP)]
    assert _chat("qwen25-math-cot") == [("system", STEP), ("user", "What is {x}?")]


def test_solve_messages_asks_in_the_template_in_use() -> None:
    assert solve_messages("Q") == get_template("paragen").messages("Q")
    with using_template(get_template("deepseek-r1")):
        assert [m.content for m in solve_messages("Q")] == ["Q\n" + STEP]
        # a strategy's own system prompt (NoThinking's) is part of its method: kept
        assert [m.role for m in solve_messages("Q", system="direct")] == ["system", "user"]
    assert solve_messages("Q")[0].content == MATH_SYSTEM
    assert prompt_setting(get_template("paragen")) is None  # old runs keep their settings ids
    assert (prompt_setting(get_template("matharena")) or "").startswith("matharena@")


def test_user_files(tmp_path: Path) -> None:
    toml = tmp_path / "mine.toml"
    toml.write_text('system = "Be brief."\nuser = "Solve: {problem}"\n')
    assert [(m.role, m.content) for m in get_template(str(toml)).messages("1+1")] == [
        ("system", "Be brief."),
        ("user", "Solve: 1+1"),
    ]
    text = tmp_path / "plain.txt"
    text.write_text("{problem}\nAnswer in a box.")
    template = get_template(str(text))
    assert template.name == "plain" and template.system is None
    bad_files = {
        "none.txt": "no placeholder",
        "two.txt": "{problem} {problem}",
        "keys.toml": 'user = "{problem}"\ncolour = "red"',
        "broken.toml": "user = ",
    }
    for bad, content in bad_files.items():
        (tmp_path / bad).write_text(content)
        with pytest.raises(ConfigError):
            get_template(str(tmp_path / bad))


@pytest.mark.parametrize("spec", ["no-such-template", "missing/file.toml"])
def test_a_bad_prompt_is_one_line_and_exit_2(spec: str, tmp_path: Path) -> None:
    args = ["eval", "-t", "arith", "--backend", "scripted", "--limit", "1", "--no-progress", "--no-plot"]
    result = runner.invoke(app, [*args, "--prompt", spec, "--out", str(tmp_path / "r")])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1 and "prompt" in result.output
    assert not (tmp_path / "r").exists()


@pytest.mark.anyio
async def test_a_sweep_asks_in_its_template_and_records_it(tmp_path: Path) -> None:
    task = get_task("arith")
    loaded = load_task(task, Selection(limit=2))
    spec = EvalSpec(task=task, problems=loaded.problems, data=loaded.source,
                    combos=build_combos(["single"], None), backend=BackendSetup("scripted"),
                    folder=RunFolder(tmp_path / "r"), execution=Execution(progress=False, grader_workers=1),
                    prompt=get_template("matharena"))  # fmt: skip
    backend = ScriptedBackend()
    records = await run_eval(spec, backend)
    asked = [s.request.messages or () for s in backend.streams]
    assert len(asked) == 2 and all(len(m) == 1 and m[0].role == "user" for m in asked)
    assert {m[0].content for m in asked} == {
        "Put your final answer within \\boxed{}.\n\n" + p.question for p in loaded.problems
    }
    info = json.loads((tmp_path / "r" / "run.json").read_text())
    assert info["prompt"]["name"] == "matharena" and info["settings"]["prompt"].startswith("matharena@")
    assert info["partial"] is False
    assert all(r.prompt is not None and r.prompt.name == "matharena" for r in records)
