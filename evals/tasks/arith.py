"""Synthetic arithmetic from a seed, in five difficulty levels, so small models land between 0 and 100%.

Level 1 adds two digits, level 2 adds or subtracts two-digit numbers, level 3 multiplies,
level 4 chains two operations, level 5 is a short multi-step word problem. Rows cycle
through the levels, so any prefix (``--limit``) mixes every level. The rows go through
the same ``datasets`` path as the hub benchmarks (``Dataset.from_list``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial
from typing import Any

from evals.tasks.base import Fields, Task

LEVELS = (1, 2, 3, 4, 5)
_NAMES = ("Ava", "Ben", "Chloe", "Dev", "Emma", "Farid", "Grace", "Hugo", "Iris", "Jonas")
_ITEMS = ("apples", "marbles", "stickers", "pencils", "cookies", "stamps", "shells", "coins")


def _level1(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    return f"What is {a} + {b}?", a + b


def _level2(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    if rng.random() < 0.5:
        return f"What is {a} + {b}?", a + b
    a, b = max(a, b), min(a, b)
    return f"What is {a} - {b}?", a - b


def _level3(rng: random.Random) -> tuple[str, int]:
    a, b = rng.randint(3, 19), rng.randint(3, 12)
    return f"What is {a} * {b}?", a * b


def _level4(rng: random.Random) -> tuple[str, int]:
    a, b, c = rng.randint(2, 20), rng.randint(2, 20), rng.randint(2, 9)
    if rng.random() < 0.5:
        return f"What is ({a} + {b}) * {c}?", (a + b) * c
    return f"What is {a} * {c} - {b}?", a * c - b


def _level5(rng: random.Random) -> tuple[str, int]:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    start, bags, per_bag, given = rng.randint(5, 30), rng.randint(2, 6), rng.randint(2, 9), rng.randint(1, 5)
    question = (
        f"{name} has {start} {item}. {name} buys {bags} bags with {per_bag} {item} in each bag, "
        f"then gives {given} {item} to a friend. How many {item} does {name} have now?"
    )
    return question, start + bags * per_bag - given


_MAKERS: dict[int, Callable[[random.Random], tuple[str, int]]] = {
    1: _level1,
    2: _level2,
    3: _level3,
    4: _level4,
    5: _level5,
}


def generate_rows(size: int = 200, seed: int = 0, levels: tuple[int, ...] = LEVELS) -> list[dict[str, Any]]:
    """``size`` problems cycling through ``levels``; the same seed gives the same rows."""
    rng = random.Random(seed)
    rows = []
    for i in range(size):
        level = levels[i % len(levels)]
        question, answer = _MAKERS[level](rng)
        rows.append(
            {"id": f"arith-{seed}-{i:04d}", "problem": question, "answer": str(answer), "level": level}
        )
    return rows


def make_task(size: int = 200, seed: int = 0, levels: tuple[int, ...] = LEVELS) -> Task:
    """An arith task with its own size, seed and levels (the registry's ``arith`` is size 200, seed 0)."""
    return Task(
        name="arith",
        description=f"synthetic arithmetic, levels {min(levels)}-{max(levels)}, seed {seed}",
        bundled_fields=Fields("problem", "answer", "id"),
        grading="auto",
        generate=partial(generate_rows, size, seed, levels),
    )


TASK = make_task()
