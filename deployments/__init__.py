"""Recipes: named, ready-to-run `ExperimentConfig`s (one module per recipe in `deployments/recipes/`).

Recipe names use hyphens (`gsm8k-qwen`); their modules use underscores (`gsm8k_qwen.py`).
"""

from __future__ import annotations

import importlib

from schemas import ExperimentConfig

RECIPES: tuple[str, ...] = ("gsm8k", "smoke", "gsm8k-qwen", "gsm8k-tinker", "gsm8k-verl-lora")


class UnknownRecipeError(KeyError):
    """No recipe of that name."""

    def __str__(self) -> str:
        return str(self.args[0])


def load_recipe(name: str) -> ExperimentConfig:
    """The `config` of recipe `name` (a fresh copy; callers may modify it)."""
    if name not in RECIPES:
        raise UnknownRecipeError(f"unknown recipe {name!r}; known recipes: {', '.join(RECIPES)}")
    module = importlib.import_module(f"deployments.recipes.{name.replace('-', '_')}")
    config = getattr(module, "config", None)
    if not isinstance(config, ExperimentConfig):
        raise TypeError(f"deployments/recipes/{name.replace('-', '_')}.py must define `config: ExperimentConfig`")
    return config.model_copy(deep=True)
