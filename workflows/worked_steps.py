"""Worked steps of an arithmetic answer, checked one by one: a denser signal than the final answer.

A worked answer ("65 + 10 = 75, 75 + 7 = 82. \\boxed{82}") states equations `a op b = c` on whole numbers
(op: + - * ×). Each is checked by computing it; the final answer's correctness is math-verify's
(workflows/math_workflow.py). A sampled answer whose final number is right can still hold a wrong step
that cancelled out, and among wrong answers one wrong fact differs from none right. The share of wrong steps
(reward_fn_args.step_penalty, per answer) tells those apart where the final answer scores them the same; the
tokens of each result (step_token_reward, per token) put the credit on the one fact that was wrong.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

# Whole numbers only: not part of a decimal (1.5) on either side; a full stop after the result ends a sentence.
_EQUATION = re.compile(r"(?<!\d)(?<!\d\.)(\d+)\s*([-+*×])\s*(\d+)\s*=\s*(-?\d+)(?!\d|\.\d)")
_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "×": lambda a, b: a * b}


def check_steps(response: str) -> tuple[int, int]:
    """(equations found, equations wrong) in `response`, left to right, without overlaps."""
    results = [right for _, right in _results(response)]
    return len(results), results.count(False)


def _results(text: str) -> list[tuple[tuple[int, int], bool]]:
    """Each equation's result: its (start, end) in `text` and whether it is right."""
    return [(m.span(4), _OPS[m[2]](int(m[1]), int(m[3])) == int(m[4])) for m in _EQUATION.finditer(text)]


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
