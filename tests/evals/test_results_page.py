"""`make results`: its size presets and overrides (the page itself is proven by running it)."""

from __future__ import annotations

from pathlib import Path

from evals.results import PRESETS, parse_args


def test_the_size_is_a_parameter_and_each_count_can_be_set_alone() -> None:
    args = parse_args(["--size", "small", "--arith", "7", "--runs", "/tmp/r"])
    assert (args.arith, args.gsm8k, args.n, args.seeds) == (7, PRESETS["small"]["gsm8k"], "2,4", "0,1")
    assert args.runs == Path("/tmp/r")
    default = parse_args([])
    assert default.size == "default" and default.seeds == "0,1" and default.runs.name == "results-default"
