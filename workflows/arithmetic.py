"""Arithmetic that a model wrote, evaluated exactly: one walk over Python's own parse of it, with a table of the
operators allowed. The calculator tool (workflows/tool_agent.py) and the worked-step checker
(workflows/worked_steps.py, which the calculator workflow computes with) differ only in the table.

Nothing is `eval`ed: a name, a call or an attribute is refused, and so are a power past MAX_EXPONENT and a number
past MAX_BITS (powers of powers would otherwise take the process's memory).
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from fractions import Fraction

Operators = dict[type[ast.operator], Callable[[Fraction, Fraction], Fraction]]

# + - * /: what a worked solution writes.
WRITTEN: Operators = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
# ...and // % **: what a tool call may ask.
TOOL: Operators = {**WRITTEN, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
MAX_EXPONENT = 10
MAX_BITS = 4096


def evaluate(source: str, operators: Operators = WRITTEN) -> Fraction:
    """The exact value of `source`, Python arithmetic over numbers with `operators`; anything else, a division by
    zero, a power past MAX_EXPONENT or a number past MAX_BITS is a ValueError."""
    try:
        return _value(ast.parse(source.strip(), mode="eval").body, operators)
    except (SyntaxError, ZeroDivisionError, TypeError, OverflowError, RecursionError, MemoryError) as err:
        raise ValueError(f"{type(err).__name__}: {err}") from err


def _value(node: ast.expr, operators: Operators) -> Fraction:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return Fraction(str(node.value))  # the decimal as written: 0.1 is 1/10, not the nearest float
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _value(node.operand, operators)
        return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.BinOp) and type(node.op) in operators:
        left, right = _value(node.left, operators), _value(node.right, operators)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ValueError("exponent too large")
        value = Fraction(operators[type(node.op)](left, right))  # a fractional power is a float: made exact
        if max(value.numerator.bit_length(), value.denominator.bit_length()) > MAX_BITS:
            raise ValueError("number too large")
        return value
    raise ValueError(f"not arithmetic: {ast.dump(node)[:60]}")
