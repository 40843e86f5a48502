"""`make results`: its size presets and overrides, the model option, the tasks, the model's header
facts and the wall time per problem (the page itself is proven by running it)."""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

import gguf
import numpy as np
import pytest

from evals.report.results import (
    EXCLUDED,
    PRESETS,
    ROWS,
    TASKS,
    chosen_rows,
    combos_for,
    main,
    parse_args,
    planned,
    settings,
)
from evals.report.results_page import CAN_AND_CANNOT, NEUTRAL, ROOT, busy_seconds, describe_model
from paragen.registry import STRATEGY_GROUP


def test_the_size_is_a_parameter_and_each_count_can_be_set_alone() -> None:
    args = parse_args(["--size", "small", "--arith", "7", "--runs", "/tmp/r"])
    assert (args.arith, args.gsm8k, args.n, args.seeds) == (7, PRESETS["small"]["gsm8k"], "2,4", "0,1")
    assert args.runs == Path("/tmp/r")
    default = parse_args([])
    assert default.size == "default" and default.seeds == "0,1" and default.runs.name == "results-default"


def test_the_default_page_names_every_built_in_strategy() -> None:
    built_in = {ep.name for ep in entry_points(group=STRATEGY_GROUP) if ep.value.startswith("strategies.")}
    on_page = {row.name for row in ROWS}
    assert not on_page & set(EXCLUDED), "a strategy is both on the page and excluded"
    assert built_in - on_page - set(EXCLUDED) == set(), "add a Row, or a reason to EXCLUDED"
    assert on_page - built_in == set(), "a row names no built-in strategy"
    assert all(reason.strip() for reason in EXCLUDED.values())


def test_every_row_builds_at_every_size_and_long_tasks_run_at_the_largest_n_only() -> None:
    for size in PRESETS:
        args = parse_args(["--size", size])
        largest = int(args.n.split(",")[-1])
        rows = chosen_rows(args)
        assert {combo.name for combo in combos_for("arith", args)} == {row.name for row in rows}
        for task in ("gsm8k", "math500"):
            combos = combos_for(task, args)
            assert {combo.name for combo in combos} == {row.name for row in rows if row.long_tasks}
            assert {combo.n for combo in combos} <= {1, largest}


def test_every_task_has_a_count_and_max_tokens_in_every_preset_and_size_0_skips_it() -> None:
    for preset in PRESETS.values():
        assert all(task.name in preset and f"{task.name}_tokens" in preset for task in TASKS)
    args = parse_args(["--math500", "3", "--math500-tokens", "99", "--gsm8k", "0"])
    assert (args.math500, args.math500_tokens) == (3, 99)
    assert [task.name for task in planned(args)] == ["arith", "math500"]
    capable = parse_args(["--size", "capable", "--math500", "2"])
    assert [task.name for task in planned(capable)] == ["arith", "math500"]


def test_a_row_whose_config_refuses_an_n_is_left_out_at_it() -> None:
    names = {combo.name: combo.n for combo in combos_for("arith", parse_args(["--n", "2"]))}
    assert "ffs_k" not in names and "lfs_k" not in names  # k=3 > n=2
    assert names["majority"] == 2


def test_the_model_option_names_the_page_plots_and_runs() -> None:
    smol = parse_args([])
    assert (smol.page, smol.plot_prefix) == (ROOT / "docs" / "results.md", "")
    qwen = parse_args(["--model", "qwen2.5-coder-0.5b", "--size", "capable", "--gsm8k", "5"])
    assert qwen.page == ROOT / "docs" / "results-qwen2.5-coder-0.5b.md"
    assert qwen.runs == ROOT / "runs" / "results-qwen2.5-coder-0.5b-capable"
    assert qwen.plot_prefix == "qwen2.5-coder-0.5b-" and qwen.assets == ROOT / "docs" / "results"
    assert (qwen.arith, qwen.gsm8k, qwen.math500, qwen.n, qwen.seeds) == (40, 5, 0, "8", "0")
    assert [row.name for row in chosen_rows(qwen)] == ["single", "majority", "best_of_n", "ffs", "deepconf"]
    assert (qwen.arith_tokens, qwen.gsm8k_tokens, qwen.math500_tokens) == (256, 400, 512)
    local = parse_args(["--model", "/models/tiny-q8.gguf", "--page", "/tmp/p.md"])
    assert (local.page, local.runs.name, local.plot_prefix) == (
        Path("/tmp/p.md"),
        "results-tiny-q8-default",
        "tiny-q8-",
    )


def test_a_model_asked_for_but_not_installed_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PARAGEN_CACHE_DIR", str(tmp_path))  # an empty cache: nothing installed
    assert main(["--model", "qwen2.5-coder-0.5b", "--runs", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "paragen model install qwen2.5-coder-0.5b" in err
    assert main(["--model", str(tmp_path / "absent.gguf"), "--runs", str(tmp_path / "runs")]) == 2
    assert "absent.gguf" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_strategies_picks_rows_and_the_page_names_the_rest_as_not_run() -> None:
    args = parse_args(["--strategies", "majority,single", "--n", "4,8"])
    assert [(c.name, c.n) for c in combos_for("arith", args)] == [
        ("single", 1), ("majority", 4), ("majority", 8)
    ]  # fmt: skip
    assert args.argv == ["--strategies", "majority,single", "--n", "4,8"]  # the header prints it
    text = "\n".join(settings(args))
    assert "| `majority` | 4,8 |" in text and "| `ffs` |" not in text
    assert "not run in this invocation (`--strategies`): `best_of_n`" in text


@pytest.mark.parametrize("names", ["majority,nosuch", " , "])
def test_strategies_naming_no_row_is_one_line_and_exit_2(
    names: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--strategies", names, "--runs", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--strategies names no row" in err
    assert not (tmp_path / "runs").exists()


def test_the_header_reads_the_quantisation_and_name_from_the_gguf(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("Tiny Test Model")
    writer.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q8_0))
    writer.add_tensor("a", np.arange(32, dtype=np.float32))
    writer.add_tensor("b", np.arange(32, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    model = describe_model(str(path))
    text = "\n".join(model.lines)
    assert (model.key, model.label) == ("tiny", "Tiny Test Model, Q8_0")
    assert "Quantisation: Q8_0 (file type 7); tensors: 2 F32" in text
    assert f"the local file {path}, sha256 " in text
    assert model.text.findings == NEUTRAL and describe_model(None).text.findings == CAN_AND_CANNOT


def test_the_wall_time_of_a_setting_counts_overlapping_problems_once() -> None:
    assert busy_seconds([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)]) == pytest.approx(4.0)
    assert busy_seconds([(1.0, 4.0), (2.0, 3.0)]) == pytest.approx(3.0)  # one inside another
    assert busy_seconds([]) == 0.0
