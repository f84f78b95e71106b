"""Worked steps of a math answer, checked one by one: a denser signal than the final answer.

A worked answer ("65 + 10 = 75, 75 + 7 = 82. \\boxed{82}", or GSM8K's "She makes $2 x 4 = $8.") states
equations `expression = result`. Each is checked by computing its left side: numbers (with `$` and thousands
commas, decimals exact), + - * x × / ÷ and parentheses, evaluated with the usual precedence in exact fractions;
a decimal result may be rounded to its own digits (10 / 3 = 3.33). The final answer's correctness is
math-verify's (workflows/math_workflow.py). A sampled answer whose final number is right can still hold a wrong
step that cancelled out, and among wrong answers one wrong fact differs from none right. The share of wrong
steps (reward_fn_args.step_penalty, per answer) tells those apart where the final answer scores them the same;
the tokens of each result (step_token_reward, per token) put the credit on the one fact that was wrong.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from fractions import Fraction

from workflows.arithmetic import evaluate

# The result: a number right after "=", not followed by more of a number (a full stop ends a sentence).
_RESULT = re.compile(r"=[ \t]*\$?[ \t]*(-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?)(?!\d|\.\d|,\d{3})")
# What an expression left of "=" may hold; scanning stops at anything else (a word, "=", "%", a sentence's
# comma or full stop).
_EXPRESSION_CHARS = set("0123456789$ \t()+-*x×/÷")


def check_steps(response: str) -> tuple[int, int]:
    """(equations found, equations wrong) in `response`, left to right."""
    results = [right for _, right in _results(response)]
    return len(results), results.count(False)


def _results(text: str) -> list[tuple[tuple[int, int], bool]]:
    """Each equation's result: its (start, end) in `text` and whether it is right."""
    found = []
    for match in _RESULT.finditer(text):
        value = value_of(left_side(text, match.start()))
        if value is not None:
            found.append((match.span(1), _agrees(value, match[1].replace(",", ""))))
    return found


def left_side(text: str, equals: int) -> str:
    """The expression ending at `equals`: the run of expression characters before it (a comma or point only
    between digits, as in 1,200 or 2.5), from its first number, parenthesis or minus sign followed by a digit."""
    start = equals
    while start > 0:
        char = text[start - 1]
        between_digits = start >= 2 and text[start - 2].isdigit() and text[start:start + 1].isdigit()
        if char in _EXPRESSION_CHARS or (char in ",." and between_digits):
            start -= 1
        else:
            break
    left = text[start:equals]
    first = re.search(r"[\d($]|-(?=\d)", left)
    return left[first.start():].strip() if first else ""


def value_of(expression: str) -> Fraction | None:
    """The exact value of an expression with at least one operator, or None when it is none (a lone number, a
    stray "x" or bracket, a division by zero)."""
    source = re.sub(r"(?<=\d),(?=\d{3})", "", expression.replace("$", ""))
    source = source.replace("x", "*").replace("×", "*").replace("÷", "/")
    if not re.search(r"\d\s*\)?\s*[-+*/]\s*\(?\s*-?\d", source):
        return None
    try:
        return evaluate(source)
    except ValueError:
        return None


def _agrees(value: Fraction, result: str) -> bool:
    """`result` is `value` exactly, or `value` rounded to the decimals `result` writes (10 / 3 = 3.33)."""
    stated = Fraction(result)
    if stated == value:
        return True
    decimals = len(result.partition(".")[2])
    return decimals > 0 and abs(stated - value) <= Fraction(1, 2 * 10**decimals)


def step_token_rewards(token_ids: Sequence[int], decode: Callable[[Sequence[int]], str], reward: float) -> list[float]:
    """Per response token: +reward on the tokens that write a right equation's result, −reward on a wrong one's,
    0 elsewhere. Tokens are placed in the text by decoding each prefix (`decode`: the tokenizer's), so the
    spans are those of the tokens themselves whatever the engine's own detokenizing."""
    ends = [len(decode(token_ids[: i + 1])) for i in range(len(token_ids))]
    rewards = [0.0] * len(token_ids)
    for (start, end), right in _results(decode(token_ids)):
        for i, token_end in enumerate(ends):
            token_start = ends[i - 1] if i else 0
            if token_start < end and token_end > start:  # the token writes part of the result
                rewards[i] = reward if right else -reward
    return rewards


def wrong_share(response: str) -> float:
    """The share of the worked equations in `response` that are wrong (0 when there are none to check)."""
    found, wrong = check_steps(response)
    return wrong / found if found else 0.0
