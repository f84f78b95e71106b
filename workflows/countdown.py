"""Trinity's `countdown_reward` (after TinyZero's countdown score), which math_workflow scores with when a
task set names it: the task is to combine given numbers into an equation equal to a target.

The gold column (format.response_key) holds JSON: {"target": 24, "numbers": [3, 4, 5, 6]}. The response's
last `<answer>...</answer>` is the equation. Reward: 1.0 when it uses each given number exactly once and
equals the target; the format score (0.1) when there is an answer that does not; 0 without one.

The equation is evaluated by walking its syntax tree (numbers, + - * /, parentheses), never with eval().

Measures, as math_workflow's: strict and lenient = the equation is right; format = there is an answer.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from collections import Counter
from typing import Any

COUNTDOWN_FORMAT_SCORE = 0.1
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_MAX_CHARS = 200  # an equation of a few numbers; longer text is not one


def countdown_truth(column: Any, task_id: str, key: str) -> tuple[float, list[int]]:
    """(target, numbers) of the gold column, or a ValueError naming the task and column."""
    try:
        truth = json.loads(column) if isinstance(column, str) else column
        return float(truth["target"]), [int(n) for n in truth["numbers"]]
    except (TypeError, KeyError, ValueError) as exc:
        raise ValueError(f"task {task_id}: countdown_reward reads the '{key}' column as JSON "
                         f'{{"target": ..., "numbers": [...]}}; got {str(column)[:80]!r} ({exc})') from None


def equation(response: str) -> str | None:
    """The last <answer>...</answer> of the response (after "Assistant:" when the prompt is echoed), or None."""
    response = response.split("Assistant:", 1)[-1]
    found = _ANSWER.findall(response)
    return found[-1].strip() if found else None


def evaluate(text: str) -> float | None:
    """The value of an arithmetic expression of numbers, + - * / and parentheses; None for anything else."""
    if len(text) > _MAX_CHARS:
        return None
    try:
        return _value(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError):
        return None


def _value(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_value(node.left), _value(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _value(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    raise ValueError("not arithmetic")


def score_countdown(response: str, target: float, numbers: list[int],
                    format_score: float = COUNTDOWN_FORMAT_SCORE) -> dict[str, float]:
    """Reward breakdown in math_workflow's keys: accuracy + format_bonus, and strict / lenient / format."""
    found = equation(response)
    right = False
    if found is not None:
        uses = Counter(int(n) for n in re.findall(r"\d+", found))
        value = evaluate(found) if uses == Counter(numbers) else None
        right = value is not None and abs(value - target) < 1e-5
    given = found is not None
    return {
        "accuracy": 1.0 if right else 0.0,
        "format_bonus": 0.0 if right or not given else format_score,  # Trinity's: 1.0, 0.1 or 0
        "strict": float(right),
        "lenient": float(right),
        "format": float(given),
    }
