"""`make results`: its size presets and overrides (the page itself is proven by running it)."""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

from evals.report.results import EXCLUDED, PRESETS, ROWS, combos_for, parse_args
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


def test_every_row_builds_at_both_sizes_and_gsm8k_runs_at_the_largest_n_only() -> None:
    for size in PRESETS:
        args = parse_args(["--size", size])
        largest = int(args.n.split(",")[-1])
        arith = {combo.name for combo in combos_for("arith", args)}
        gsm8k = combos_for("gsm8k", args)
        assert arith == {row.name for row in ROWS}
        assert {combo.name for combo in gsm8k} == {row.name for row in ROWS if row.gsm8k}
        assert {combo.n for combo in gsm8k} <= {1, largest}
