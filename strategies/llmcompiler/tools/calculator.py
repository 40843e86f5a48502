"""Exact arithmetic with sympy, built from a whitelisted syntax tree (model text is never eval'ed).

``sympy.sympify`` and ``parse_expr`` call ``eval``; here the expression is parsed with
``ast`` and only numbers, a few operators, named constants and whitelisted functions
become sympy objects. Exact rationals stay exact ("7/3"), so a result substituted into
the next expression loses nothing (Game of 24 needs 8/(3-8/3) to be exactly 24).
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

import sympy
from pydantic import BaseModel, Field

from strategies.llmcompiler.tools import ToolInputError, tool

_MAX_EXPONENT = 10_000
_MAX_LENGTH = 2_000

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Mod: operator.mod,
    ast.FloorDiv: lambda a, b: sympy.floor(a / b),
    ast.Pow: operator.pow,
    ast.BitXor: operator.pow,  # models write 2^3 for a power; nobody means xor here
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": sympy.sqrt,
    "log": sympy.log,
    "ln": sympy.log,
    "exp": sympy.exp,
    "sin": sympy.sin,
    "cos": sympy.cos,
    "tan": sympy.tan,
    "abs": sympy.Abs,
    "floor": sympy.floor,
    "ceil": sympy.ceiling,
    "factorial": lambda n: sympy.factorial(n) if n.is_number and abs(n) <= 2000 else _too_big(),
    "max": sympy.Max,
    "min": sympy.Min,
    "round": lambda x, d=0: sympy.Float(round(float(x), int(d))) if d else sympy.Integer(round(float(x))),
}
_CONSTANTS: dict[str, Any] = {"pi": sympy.pi, "e": sympy.E, "E": sympy.E}


class CalculatorArgs(BaseModel):
    expression: str = Field(description="an arithmetic expression, e.g. (3 + 5) * 2 / 7")


@tool(
    "calculator",
    'calculator(expression: str) -> str: evaluates arithmetic exactly, e.g. calculator("(4+8)*2"). '
    "Supports + - * / ** % sqrt log exp sin cos tan abs floor ceil factorial max min round, pi, e.",
)
async def calculator(args: CalculatorArgs) -> str:
    return evaluate(args.expression)


def evaluate(expression: str) -> str:
    """The exact value of ``expression`` as text: an integer, a fraction "p/q", or a decimal."""
    return format_value(to_sympy(expression))


def to_sympy(expression: str) -> Any:
    text = expression.strip().replace("×", "*").replace("÷", "/").replace("−", "-")
    if not text or len(text) > _MAX_LENGTH:
        raise ToolInputError("calculator: the expression is empty or too long")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ToolInputError(f"calculator: cannot parse {expression!r}: {exc.msg}") from exc
    try:
        return _build(tree.body)
    except ZeroDivisionError as exc:
        raise ToolInputError("calculator: division by zero") from exc


def format_value(value: Any) -> str:
    value = sympy.nsimplify(value) if isinstance(value, sympy.Float) and value == int(value) else value
    if value in (sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
        raise ToolInputError(f"calculator: the result is {value} (division by zero?)")
    if isinstance(value, sympy.Integer | sympy.Rational):
        return str(value)
    number = value.evalf(15)
    if not number.is_number or not number.is_real:
        raise ToolInputError(f"calculator: the result is not a real number ({value})")
    return _decimal(float(number))


def _decimal(value: float) -> str:
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.10g}"


def _build(node: ast.expr) -> Any:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        return sympy.Rational(str(node.value)) if isinstance(node.value, float) else sympy.Integer(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _build(node.left), _build(node.right)
        if isinstance(node.op, ast.Pow | ast.BitXor):
            _check_power(left, right)
        if isinstance(node.op, ast.Div | ast.Mod | ast.FloorDiv) and right == 0:
            raise ZeroDivisionError
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _build(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
        if node.keywords:
            raise ToolInputError("calculator: functions take positional arguments only")
        return _FUNCTIONS[node.func.id](*[_build(a) for a in node.args])
    raise ToolInputError(f"calculator: unsupported syntax {ast.unparse(node)!r}")


def _too_big() -> Any:
    raise ToolInputError("calculator: factorial argument too large")


def _check_power(base: Any, exponent: Any) -> None:
    # 9**9**9 would hang the event loop's thread: refuse results with more than ~10k digits
    if not (base.is_number and exponent.is_number):
        return
    size = abs(float(exponent)) * math.log10(max(abs(float(base)), 2.0))
    if size > _MAX_EXPONENT:
        raise ToolInputError("calculator: the power is too large")
