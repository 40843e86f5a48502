"""Game of 24 (Tree-of-Thoughts puzzle list): make 24 from four numbers with + - * /, each used once.

Graded by evaluating the answer expression exactly (fractions, no ``eval``): it must use each
given number exactly once, only the four operations and parentheses, and equal 24.
"""

from __future__ import annotations

import ast
import csv
import re
from collections import Counter
from fractions import Fraction
from pathlib import Path
from typing import Any

from paragen.types import Problem

DATA = Path(__file__).resolve().parent.parent / "data" / "llmcompiler" / "game24_tot.csv"
TOT_TEST_ROWS = range(900, 1000)  # the rows Tree-of-Thoughts evaluates on (0-based)

QUESTION = (
    "Use the numbers {numbers} with +, -, * and / (and parentheses) to make 24. Use each number exactly "
    "once. The final answer is the expression, for example (1 + 2 + 3) * 4."
)


def load_game24(rows: range | None = TOT_TEST_ROWS, path: Path = DATA) -> list[Problem]:
    """The puzzles of ``rows`` (all 1362 when None) as problems; the numbers ride in ``meta``."""
    with path.open(newline="", encoding="utf-8") as f:
        puzzles = [row["Puzzles"] for row in csv.DictReader(f)]
    picked = range(len(puzzles)) if rows is None else rows
    return [
        Problem(
            id=f"game24-{i}",
            question=QUESTION.format(numbers=", ".join(puzzles[i].split())),
            gold=None,
            meta={"task": "game24", "numbers": [int(n) for n in puzzles[i].split()]},
        )
        for i in picked
    ]


def check_24(answer: str | None, numbers: list[int]) -> bool:
    """Whether ``answer`` is an expression over exactly ``numbers`` that equals 24."""
    if not answer:
        return False
    text = re.sub(r"=\s*24\s*$", "", answer.strip().strip("$`")).replace("×", "*").replace("÷", "/")
    try:
        tree = ast.parse(text.replace("\\times", "*").replace("\\div", "/"), mode="eval")
        used: list[int] = []
        value = _value(tree.body, used)
    except (SyntaxError, ValueError, ZeroDivisionError):
        return False
    return value == 24 and Counter(used) == Counter(numbers)


def grade_game24(problem: Problem, answer: str | None) -> bool:
    return check_24(answer, list(problem.meta["numbers"]))


def game24_rows(rows: range | None = TOT_TEST_ROWS, path: Path = DATA) -> list[dict[str, Any]]:
    """The puzzles as harness rows; the gold field holds the four numbers (see :func:`same_as_24`)."""
    return [
        {"id": p.id, "problem": p.question, "answer": " ".join(map(str, p.meta["numbers"]))}
        for p in load_game24(rows, path)
    ]


def same_as_24(answer: str, numbers: str) -> bool:
    """The harness's equivalence for Game of 24: ``numbers`` is the gold field, "4 9 10 13"."""
    return check_24(answer, [int(n) for n in numbers.split()])


def _value(node: ast.expr, used: list[int]) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        used.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult | ast.Div):
        left, right = _value(node.left, used), _value(node.right, used)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        return left * right if isinstance(node.op, ast.Mult) else left / right
    raise ValueError(f"not allowed in a Game of 24 answer: {ast.dump(node)}")


__all__ = [
    "QUESTION",
    "TOT_TEST_ROWS",
    "check_24",
    "game24_rows",
    "grade_game24",
    "load_game24",
    "same_as_24",
]
