"""Presets: every file valid and marked not reproduced, listed, run by name with flags overriding
it, end to end on the engine (SmolLM2, tiny limits: the run's shape) and on a scripted backend
whose answers make the report's comparison with each published figure exact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evals.cli import app
from evals.presets import PRESET_DIR, load_preset, preset_names
from evals.report import build_report
from evals.tasks import Selection, get_task, load_problems

runner = CliRunner()
PRESETS = preset_names()
STAND_IN = Path(__file__).resolve().parent / "data" / "matharena" / "brumo_2025" / "train.jsonl"
FIELDS = ["--question-field", "problem", "--answer-field", "answer", "--id-field", "problem_idx"]
QUIET = ["--limit", "1", "--no-progress", "--no-plot", "--seed", "0"]


def test_every_preset_is_valid_and_says_its_figures_were_not_reproduced() -> None:
    assert len(PRESETS) >= 8
    for name in PRESETS:
        preset = load_preset(name)
        assert preset.reproduced is False and preset.published
        assert "Not reproduced with paragen" in (PRESET_DIR / f"{name}.toml").read_text()
        assert all(f.source for f in preset.published)


def test_presets_lists_them_and_a_bad_name_is_one_line(tmp_path: Path) -> None:
    listed = runner.invoke(app, ["presets"])
    assert listed.exit_code == 0 and [line.split(":")[0] for line in listed.stdout.splitlines()] == PRESETS
    bad = runner.invoke(app, ["eval", "--preset", "no-such-preset", "--out", str(tmp_path / "r")])
    assert bad.exit_code == 2 and len(bad.output.strip().splitlines()) == 1 and "preset" in bad.output


def _task_args(name: str) -> list[str]:
    """Hub-only tasks (no copy ships) run on a local stand-in in the same fields."""
    hub_only = load_preset(name).task.startswith("hf:") or get_task(load_preset(name).task).bundled is None
    return ["-t", str(STAND_IN), *FIELDS] if hub_only else []


def _gold(name: str) -> str:
    task = load_preset(name).task
    if _task_args(name):
        return str(json.loads(STAND_IN.read_text().splitlines()[0])["answer"])
    return str(load_problems(get_task(task), Selection(limit=1), offline=True)[0].gold)


@pytest.mark.parametrize("name", ["r1-distill-qwen-1.5b-aime24", "deepconf-online-brumo25"])
def test_flags_override_the_preset_and_run_json_keeps_it(name: str, tmp_path: Path) -> None:
    out = tmp_path / "r"
    args = ["eval", "--preset", name, "--backend", "scripted", "-n", "2", "--max-tokens", "16", *QUIET]
    result = runner.invoke(app, [*args, *_task_args(name), "-s", "majority", "--out", str(out)])
    assert result.exit_code == 0, result.output
    info = json.loads((out / "run.json").read_text())
    preset = load_preset(name)
    sampling = info["settings"]["sampling"]
    assert (sampling["max_tokens"], sampling["temperature"], sampling["top_p"]) == (
        16, preset.temperature, preset.top_p
    )  # fmt: skip
    assert [s["name"] for s in info["strategies"]] == ["majority"]
    assert info["preset"]["name"] == name and "max_tokens" in info["preset"]["overridden"]
    assert info["prompt"]["name"] == load_preset(name).prompt.removesuffix(".prompt.toml")


@pytest.mark.parametrize("name", PRESETS)
def test_on_a_scripted_backend_the_comparison_is_exact(name: str, tmp_path: Path) -> None:
    """Every sample answers right, with the same tokens: measured accuracy, pass@1, maj@k and pass@k
    are 100% with a [100%, 100%] interval, token savings 0% in [0%, 0%]; none holds the published value."""
    script = tmp_path / "right.jsonl"
    script.write_text(json.dumps({"text": f"so \\boxed{{{_gold(name)}}}"}) + "\n")
    out = tmp_path / "r"
    extra = ["-s", "single"] if "hogwild" in load_preset(name).strategies else []  # needs a shared KV cache
    args = ["eval", "--preset", name, "--backend", f"scripted:{script}", *QUIET, *_task_args(name), *extra]
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = build_report(out, workers=1)["published"]
    assert len(rows) == len(load_preset(name).published)
    for row in rows:
        expected = 0.0 if row["metric"] == "token_saving" else 100.0
        assert (row["measured"], row["within"]) == (expected, False), row
        assert row["metric"] == "pass@k" or (row["low"], row["high"]) == (expected, expected), row


@pytest.mark.parametrize("name", PRESETS)
def test_on_the_engine_at_a_tiny_size(name: str, smol_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    preset = load_preset(name)
    small = ["-n", "2", "--max-tokens", "8", "--deadline", "120"]
    options = [
        "-O", "deepconf_online.n_init=1", "-O", "deepconf_online.batch=1",
    ] if "deepconf_online" in preset.strategies else []  # fmt: skip
    args = ["eval", "--preset", name, "--backend", "engine", *QUIET, *small, *options, *_task_args(name)]
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    records = (out / "records.jsonl").read_text().splitlines()
    assert len(records) == len(preset.strategies)  # one problem under each of the preset's strategies
    assert {json.loads(line)["strategy"] for line in records} == set(preset.strategies)
    assert json.loads((out / "run.json").read_text())["partial"] is False
