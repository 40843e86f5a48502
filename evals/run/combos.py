"""The sweep's configurations: each strategy at each n, set on its count field."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from paragen.errors import ConfigError
from paragen.registry import load_strategy
from paragen.strategy import Strategy, build_strategy, count_field, parallel_samples


@dataclass(frozen=True)
class Combo:
    """One strategy configuration of the sweep: ``n`` is the value of its count field (samples, or
    Hogwild!'s workers), 1 for strategies without one."""

    name: str
    n: int
    strategy: Strategy


def build_combos(
    names: Sequence[str], ns: Sequence[int] | None, options: dict[str, dict[str, Any]] | None = None
) -> list[Combo]:
    """Every strategy at every n, set on its count field (``n``; ``workers`` for hogwild).

    Strategies without a count field run once. ``ns=None`` (no ``--n`` given): samplers run at
    n = 1, and strategies whose count is something else (hogwild's workers) at their own default.
    """
    if not names:
        raise ConfigError("no strategy given", hint="pass e.g. -s single,majority")
    combos = []
    for name in names:
        extra = dict((options or {}).get(name, {}))
        cls = load_strategy(name)
        field_name = count_field(cls)
        if field_name is None:
            combos.append(Combo(name, 1, build_strategy(name, extra)))
        elif ns is None and field_name != "n":
            strategy = build_strategy(name, extra)
            count = getattr(strategy.config, field_name)  # None: PDR's width when its rounds are given whole
            combos.append(
                Combo(name, count if isinstance(count, int) else parallel_samples(strategy), strategy)
            )
        else:
            combos.extend(_combos_over_n(name, field_name, [1] if ns is None else ns, extra))
    return combos


def _combos_over_n(name: str, field_name: str, ns: Sequence[int], extra: dict[str, Any]) -> list[Combo]:
    """One combo per n; a strategy whose count only admits 1 (e.g. single) runs once at n=1."""
    if not _admits_many(name, field_name):
        return [Combo(name, 1, build_strategy(name, {**extra, field_name: 1}))]
    return [Combo(name, n, build_strategy(name, {**extra, field_name: n})) for n in ns]


def _admits_many(name: str, field_name: str) -> bool:
    """Whether the strategy's count field allows more than 1, read from its bounds (nothing is built,
    so a constraint tied to n, like ffs_k's k <= n, is checked at each real n instead)."""
    for bound in load_strategy(name).Config.model_fields[field_name].metadata:
        le, lt = getattr(bound, "le", None), getattr(bound, "lt", None)
        if (le is not None and le < 2) or (lt is not None and lt <= 2):
            return False
    return True
