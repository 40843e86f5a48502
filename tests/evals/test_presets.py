"""Presets: every file valid and marked not reproduced, listed, run by name with flags overriding
it, end to end on the engine (SmolLM2, tiny limits: the run's shape) and on a scripted backend
whose answers make the report's comparison with each published figure exact (a speedup, which
is wall time, is checked against the latencies the records hold)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evals.analysis.published import published_rows
from evals.cli import app
from evals.report.build import build_report
from evals.run.presets import PRESET_DIR, load_preset, preset_names
from evals.run.records import EvalRecord, load_records
from evals.tasks import Selection, get_task, load_problems
from paragen.errors import ConfigError

runner = CliRunner()
PRESETS = preset_names()
STAND_IN = Path(__file__).resolve().parent / "data" / "matharena" / "brumo_2025" / "train.jsonl"
FIELDS = ["--question-field", "problem", "--answer-field", "answer", "--id-field", "problem_idx"]
QUIET = ["--limit", "1", "--no-progress", "--no-plot", "--seed", "0"]
TOOL_STRATEGIES = {"llmcompiler", "react"}
# What cannot run here, replaced per strategy (or strategy:scaffold): DeepPrune's trained 4B judge by
# the lexical stand-in; DeepSeekMath-V2's heavy pool (64 proofs graded 64 times, 16 waves) by two
# proofs graded twice, one wave.
STAND_INS = {
    "deepprune": ["deepprune.judge=lexical", "deepprune.judge_options={}"],
    "verify_refine:deepseek_math": [
        "verify_refine.pool_size=2",
        "verify_refine.verifications=2",
        "verify_refine.verifications_per_refinement=1",
        "verify_refine.max_iterations=1",
    ],
}
# The engine at a tiny size: options that --max-tokens does not reach, cut to a few tokens each.
TINY = {
    "deepconf_online": ["deepconf_online.n_init=1", "deepconf_online.batch=1"],
    "pdr": ["pdr.max_tokens=8"],
    "sr": ["sr.max_tokens=8"],
    "llmcompiler": ["llmcompiler.max_plan_tokens=8", "llmcompiler.max_join_tokens=8"],
    "react": ["react.max_step_tokens=8", "react.max_steps=1"],
    "verify_refine": [
        "verify_refine.max_iterations=1",
        "verify_refine.verify_tokens=8",
        "verify_refine.verdict_tokens=8",
    ],
}


def test_every_preset_is_valid_and_says_its_figures_were_not_reproduced() -> None:
    assert len(PRESETS) >= 11
    covered = {s for name in PRESETS for s in load_preset(name).strategies}
    assert {"pdr", "deepprune", "llmcompiler", "ffs", "hogwild", "deepconf_online", "dynasor"} <= covered
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


def _options(name: str, table: dict[str, list[str]]) -> list[str]:
    """The table's -O options for the preset's strategies, by name and by name:scaffold."""
    preset = load_preset(name)
    keys = [k for s in preset.strategies for k in (s, f"{s}:{preset.options.get(s, {}).get('scaffold')}")]
    return [arg for k in keys for item in table.get(k, []) for arg in ("-O", item)]


def _task_args(name: str) -> list[str]:
    """Hub-only tasks (no copy ships, none is generated) run on a local stand-in in the same fields."""
    task = load_preset(name).task
    hub_only = task.startswith("hf:") or (get_task(task).bundled is None and get_task(task).generate is None)
    return ["-t", str(STAND_IN), *FIELDS] if hub_only else []


def _script(name: str) -> str:
    """A reply right for every call: a boxed gold answer; for the tool strategies a plan that only
    joins (the planner stops at <END_OF_PLAN>), then Finish(gold) for the joiner and for ReAct; for
    verify_refine a "yes" before it, so its verdicts pass and it accepts; for CISC a "1" first, so
    each path's one-token P(True) call reads a confidence."""
    if TOOL_STRATEGIES & set(load_preset(name).strategies):
        return f"1. join()<END_OF_PLAN>\nThought: I can answer now.\nAction: Finish({_gold(name)})"
    if "verify_refine" in load_preset(name).strategies:  # every yes/no verdict passes
        return f"Yes, so \\boxed{{{_gold(name)}}}"
    if "cisc" in load_preset(name).strategies:
        return f"1 so \\boxed{{{_gold(name)}}}"
    return f"so \\boxed{{{_gold(name)}}}"


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


def _scripted_run(name: str, tmp_path: Path, *extra: str) -> Path:
    script = tmp_path / "right.jsonl"
    script.write_text(json.dumps({"text": _script(name)}) + "\n")
    out = tmp_path / "r"
    hogwild = ["-s", "single"] if "hogwild" in load_preset(name).strategies else []  # needs a shared KV cache
    args = ["eval", "--preset", name, "--backend", f"scripted:{script}", *QUIET, *_task_args(name), *hogwild]
    result = runner.invoke(app, [*args, *_options(name, STAND_INS), *extra, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _latency_ratio(out: Path, baseline: str, strategy: str) -> float:
    lines = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    total = {
        s: sum(r["result"]["usage"]["latency_s"] for r in lines if r["strategy"] == s)
        for s in (baseline, strategy)
    }
    return float(total[baseline] / total[strategy])


@pytest.mark.parametrize("name", PRESETS)
def test_on_a_scripted_backend_the_comparison_is_exact(name: str, tmp_path: Path) -> None:
    """Every sample answers right, with the same tokens: measured accuracy, pass@1, maj@k and pass@k
    are 100% with a [100%, 100%] interval, token savings 0% in [0%, 0%]; none holds the published
    value. A speedup is the baseline's latency over the strategy's, as the records hold them."""
    out = _scripted_run(name, tmp_path)
    report = build_report(out, workers=1)
    assert all(row["accuracy"] == 1.0 for row in report["summary"]), report["summary"]
    rows = report["published"]
    assert len(rows) == len(load_preset(name).published)
    for row in rows:
        if row["metric"] == "speedup":
            assert row["unit"] == "x"
            assert row["measured"] == pytest.approx(
                _latency_ratio(out, row["baseline"], row["strategy"]), 1e-9
            )
            assert row["low"] <= row["measured"] <= row["high"], row
            assert row["within"] == (row["low"] <= row["published"] <= row["high"]), row
            continue
        if row["metric"] == "path_saving":  # every n reaches the baseline: the fewest paths save the most
            fewest = min(load_preset(name).n or [1])
            figure = next(f for f in load_preset(name).published if f.metric == "path_saving")
            assert figure.baseline_n is not None
            assert row["measured"] == pytest.approx(100 * (1 - fewest / figure.baseline_n)), row
            assert (row["unit"], row["low"], row["within"]) == ("%", None, None), row
            continue
        expected = 0.0 if row["metric"] == "token_saving" else 100.0
        assert (row["unit"], row["measured"], row["within"]) == ("%", expected, False), row
        assert row["metric"] == "pass@k" or (row["low"], row["high"]) == (expected, expected), row


def _timed(record: EvalRecord, seconds: float) -> EvalRecord:
    usage = record.result.usage.model_copy(update={"latency_s": seconds})
    return record.model_copy(update={"result": record.result.model_copy(update={"usage": usage})})


def test_the_speedup_is_the_baselines_mean_latency_over_the_strategys(tmp_path: Path) -> None:
    """The records' latencies set by hand: 1.8x on each of two problems is 1.8x in [1.8x, 1.8x], the
    published figure within it; 1.5x and 2x pool to the ratio of the means, between the two."""
    name = "llmcompiler-hotpotqa"
    records = load_records(_scripted_run(name, tmp_path, "--limit", "2")).latest()
    preset = load_preset(name).record()
    a, b = sorted({r.problem.id for r in records})
    assert {r.strategy for r in records} == {"llmcompiler", "react"} and len(records) == 4

    def speedup(seconds: dict[tuple[str, str], float]) -> dict[str, Any]:
        timed = [_timed(r, seconds[(r.strategy, r.problem.id)]) for r in records]
        return published_rows(preset, [], [], timed)[0]

    same = speedup(
        {(s, p): 1.0 if s == "llmcompiler" else 1.8 for s in ("llmcompiler", "react") for p in (a, b)}
    )
    assert (same["measured"], same["low"], same["high"]) == pytest.approx((1.8, 1.8, 1.8))
    assert same["within"] is True and same["unit"] == "x"
    mixed = speedup({("llmcompiler", a): 2.0, ("react", a): 3.0, ("llmcompiler", b): 1.0, ("react", b): 2.0})
    assert mixed["measured"] == pytest.approx(5 / 3)  # (3 + 2) / (2 + 1), not the mean of 1.5 and 2
    assert 1.5 <= mixed["low"] <= mixed["measured"] <= mixed["high"] <= 2.0 and mixed["within"] is True


def test_the_path_saving_is_the_fewest_paths_reaching_the_baselines_accuracy() -> None:
    """CISC at 1, 4, 8 and 16 paths against majority at 30 (accuracy 0.6): 4 paths are the first to
    reach 0.6 (1 - 4/30); when none reaches it, or the baseline's n is not in the run, no value."""
    figure = {"metric": "path_saving", "strategy": "cisc", "n": None, "baseline": "majority",
              "baseline_n": 30, "value": 73.3, "source": "s", "note": ""}  # fmt: skip
    preset = {"name": "p", "published": [figure]}

    def measured(accuracies: dict[int, float], base: dict[int, float]) -> dict[str, Any]:
        rows = [{"strategy": "cisc", "n": n, "accuracy": a} for n, a in accuracies.items()]
        rows += [{"strategy": "majority", "n": n, "accuracy": a} for n, a in base.items()]
        return published_rows(preset, rows, [], [])[0]

    row = measured({16: 0.7, 1: 0.4, 8: 0.6, 4: 0.6}, {8: 0.5, 30: 0.6})
    assert row["measured"] == pytest.approx(100 * (1 - 4 / 30)) and row["within"] is None
    assert (row["unit"], row["baseline"], row["low"]) == ("%", "majority", None)
    assert measured({1: 0.4, 8: 0.5}, {30: 0.6})["measured"] is None
    assert measured({1: 0.9}, {8: 0.6})["measured"] is None


def test_a_path_saving_figure_names_the_baselines_paths(tmp_path: Path) -> None:
    figure = '[[published]]\nmetric = "path_saving"\nstrategy = "cisc"\nbaseline = "majority"\n'
    figure += 'value = 40.0\nsource = "s"\n'  # no baseline_n
    head = 'paper = "p"\nmodel = "m"\ntask = "arith"\nprompt = "paragen"\ntemperature = 0.6\ntop_p = 0.95\n'
    path = tmp_path / "bad.toml"
    path.write_text(
        head + 'max_tokens = 64\nstrategies = ["cisc", "majority"]\nreproduced = false\n' + figure
    )
    with pytest.raises(ConfigError, match="baseline_n"):
        load_preset(str(path))


def _one_per_shape(names: list[str]) -> list[str]:
    """The first preset of each shape (strategies and task): presets that differ only in their model
    run alike on the engine, where SmolLM2 stands in for every model."""
    shapes: dict[tuple[tuple[str, ...], str], str] = {}
    for name in names:
        preset = load_preset(name)
        shapes.setdefault((tuple(preset.strategies), preset.task), name)
    return list(shapes.values())


@pytest.mark.parametrize("name", _one_per_shape(PRESETS))
def test_on_the_engine_at_a_tiny_size(name: str, smol_dir: Path, tmp_path: Path) -> None:
    """SmolLM2-135M runs every preset's strategies on one problem. It writes no plan an LLMCompiler
    planner can parse, nor a ReAct Finish, in 8 tokens: a tool preset's records are then the
    strategies' own errors (exit 1, no result), each with the engine's tokens behind it."""
    out = tmp_path / "r"
    preset = load_preset(name)
    small = ["-n", "2", "--max-tokens", "8", "--deadline", "120"]
    options = _options(name, STAND_INS) + _options(name, TINY)
    args = ["eval", "--preset", name, "--backend", "engine", *QUIET, *small, *options, *_task_args(name)]
    result = runner.invoke(app, [*args, "--out", str(out)])
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    if TOOL_STRATEGIES & set(preset.strategies) and result.exit_code == 1:
        assert {r["grade"]["outcome"] for r in records} == {"error"}, result.output
        assert "failed in the strategy" in result.output and "in the backend" not in result.output
        assert "every run ended in the strategy's own error" in result.output
        assert all(sum(t["completion_tokens"] for t in r["result"]["traces"]) > 0 for r in records)
    else:
        assert result.exit_code == 0, result.output
    assert len(records) == len(preset.strategies)  # one problem under each of the preset's strategies
    assert {r["strategy"] for r in records} == set(preset.strategies)
    assert json.loads((out / "run.json").read_text())["partial"] is False
