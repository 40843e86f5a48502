"""What a sweep's --n means per strategy: samples for most, Hogwild!'s workers for hogwild."""

from __future__ import annotations

import pytest

from evals.run.combos import build_combos
from paragen.cli_options import count_option, parse_strategy_options
from paragen.errors import ConfigError


def test_n_sets_hogwild_workers_and_the_samples_of_the_others() -> None:
    combos = build_combos(["majority", "hogwild", "hogwild_text", "single"], [2, 4])
    got = [
        (c.name, c.n, getattr(c.strategy.config, "workers", getattr(c.strategy.config, "n", None)))
        for c in combos
    ]
    assert got == [
        ("majority", 2, 2),
        ("majority", 4, 4),
        ("hogwild", 2, 2),
        ("hogwild", 4, 4),
        ("hogwild_text", 2, 2),
        ("hogwild_text", 4, 4),
        ("single", 1, 1),  # its n admits only 1
    ]


def test_without_n_samplers_run_once_and_hogwild_at_its_default_team() -> None:
    combos = build_combos(["majority", "hogwild"], None)
    assert [(c.name, c.n) for c in combos] == [("majority", 1), ("hogwild", 2)]
    assert build_combos(["llmcompiler"], [2, 4])[0].n == 1  # no count at all: once


def test_the_count_is_set_only_with_n() -> None:
    with pytest.raises(ConfigError, match="workers is set with -n"):
        parse_strategy_options(["hogwild.workers=3"], ["hogwild"])
    assert count_option("hogwild") == "workers" and count_option("ffs") == "n"
    with pytest.raises(ConfigError, match="has no n"):
        count_option("llmcompiler")
