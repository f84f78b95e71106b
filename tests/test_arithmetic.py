"""workflows/arithmetic.py: the one evaluator of model-written arithmetic (the calculator tool's and the worked-step
checker's): exact values, the operator tables, and a fuzz (hypothesis) of what a model may write — every text is a
value or a ValueError, never another exception, and never a number that takes the process's memory."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workflows.arithmetic import MAX_BITS, TOOL, WRITTEN, evaluate
from workflows.tool_agent import calculate
from workflows.worked_steps import value_of


def test_values_are_exact_and_the_table_decides_the_operators() -> None:
    assert evaluate("0.1 + 0.2") == Fraction(3, 10)  # in floats: 0.30000000000000004
    assert evaluate("(12 + 7) * 3 - -1") == 58 and evaluate("10 / 4") == Fraction(5, 2)
    with pytest.raises(ValueError, match="not arithmetic"):
        evaluate("7 // 2", WRITTEN)  # a worked solution never writes it
    assert evaluate("7 // 2", TOOL) == 3 and evaluate("7 % 3", TOOL) == 1 and evaluate("2 ** 10", TOOL) == 1024


@pytest.mark.parametrize("text", ["__import__('os')", "x", "1/0", "2 ** 11", "((9 ** 10) ** 10) ** 10", "abs(-1)",
                                  "(1).real", "[1, 2]", "1 if 1 else 2", "True + 1"])
def test_anything_but_bounded_arithmetic_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        calculate(text)


def test_both_users_read_the_same_arithmetic() -> None:
    assert calculate("1,000 / 4") == 250 and value_of("1,000 / 4") == 250
    assert calculate("2 x 4") == 8 and value_of("$2 x 4") == 8
    assert calculate("2 ** 0.5") == pytest.approx(2**0.5)


@settings(max_examples=800, deadline=None, database=None, derandomize=True)
@given(st.text(alphabet="0123456789.+-*/%() x", max_size=40))
def test_any_text_a_model_writes_is_a_value_or_a_value_error(text: str) -> None:
    try:
        value = evaluate(text.replace("x", "*"), TOOL)
    except ValueError:
        return
    assert max(value.numerator.bit_length(), value.denominator.bit_length()) <= MAX_BITS
