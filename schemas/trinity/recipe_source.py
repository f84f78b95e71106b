"""An imported config written as a Python recipe (`rft import-trinity --write`): the settings the user set, as the
literal a recipe module holds, so that the recipe validates to the same config."""

from __future__ import annotations

from typing import Any

from schemas.experiment import ExperimentConfig


def recipe_source(config: ExperimentConfig, *, source: str, recipe_name: str) -> str:
    """A deployments/recipes-style Python module whose `config` equals `config`."""
    body = _py_literal(config.user_data(), level=1)
    return (
        f'"""{recipe_name} — imported from {source} by `rft import-trinity`.\n\n'
        f"Run it:  rft run <this file>     (inspect first: rft validate <this file>)\n"
        f'"""\n\n'
        "from schemas import ExperimentConfig\n\n"
        f"config = ExperimentConfig.model_validate(\n    {body}\n)\n"
    )


def _py_literal(value: Any, level: int) -> str:
    """`value` as a Python literal, one key or item per line (black-like)."""
    pad, inner = "    " * level, "    " * (level + 1)
    if isinstance(value, dict) and value:
        items = "".join(f"{inner}{k!r}: {_py_literal(v, level + 1)},\n" for k, v in value.items())
        return "{\n" + items + pad + "}"
    if isinstance(value, list) and value:
        items = "".join(f"{inner}{_py_literal(v, level + 1)},\n" for v in value)
        return "[\n" + items + pad + "]"
    return repr(value)
