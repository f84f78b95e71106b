"""Worked steps of an arithmetic answer, checked one by one: a denser signal than the final answer.

A worked answer ("65 + 10 = 75, 75 + 7 = 82. \\boxed{82}") states equations `a op b = c` on whole numbers
(op: + - * ×). Each is checked by computing it; the final answer's correctness is math-verify's
(workflows/math_workflow.py). A sampled answer whose final number is right can still hold a wrong step
that cancelled out, and among wrong answers one wrong fact differs from none right: the share of wrong
steps tells those apart where the final answer scores them the same.
"""

from __future__ import annotations

import re

# Whole numbers only: not part of a decimal (1.5) on either side; a full stop after the result ends a sentence.
_EQUATION = re.compile(r"(?<!\d)(?<!\d\.)(\d+)\s*([-+*×])\s*(\d+)\s*=\s*(-?\d+)(?!\d|\.\d)")
_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "×": lambda a, b: a * b}


def check_steps(response: str) -> tuple[int, int]:
    """(equations found, equations wrong) in `response`, left to right, without overlaps."""
    found = wrong = 0
    for a, op, b, c in _EQUATION.findall(response):
        found += 1
        wrong += _OPS[op](int(a), int(b)) != int(c)
    return found, wrong


def step_penalty(response: str, penalty: float) -> float:
    """−penalty × the share of wrong worked equations (0 when there are none to check)."""
    found, wrong = check_steps(response)
    return -penalty * wrong / found if found else 0.0
