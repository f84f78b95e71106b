"""Rollout workflows, selected by a taskset's `default_workflow_type`.

Adding one: write `workflows/<name>.py` with a `@register_workflow("<name>")` subclass of `Workflow`
and import it below.
"""

from __future__ import annotations

from workflows import calculator as _calculator  # noqa: F401  (registers math_calculator_workflow)
from workflows import frozenlake as _frozenlake  # noqa: F401  (registers frozenlake)
from workflows import hello_workflow as _hello_workflow  # noqa: F401  (registers hello_workflow)
from workflows import judge as _judge  # noqa: F401  (registers llm_judge_workflow)
from workflows import math_workflow as _math_workflow  # noqa: F401  (registers math_workflow)
from workflows import q20 as _q20  # noqa: F401  (registers q20)
from workflows import sciworld as _sciworld  # noqa: F401  (registers sciworld)
from workflows import sudoku as _sudoku  # noqa: F401  (registers sudoku)
from workflows import textworld as _textworld  # noqa: F401  (registers textworld)
from workflows import tool_agent as _tool_agent  # noqa: F401  (registers gsm8k_tool_agent)
from workflows.base import WORKFLOWS, Workflow, register_workflow


def get_workflow(name: str) -> type[Workflow]:
    """The workflow class registered as `name`; an unknown name lists the known ones."""
    try:
        return WORKFLOWS[name]
    except KeyError:
        known = ", ".join(sorted(WORKFLOWS)) or "none"
        raise ValueError(f"unknown workflow type '{name}' (known: {known})") from None


__all__ = ["WORKFLOWS", "Workflow", "get_workflow", "register_workflow"]
