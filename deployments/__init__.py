"""Recipes: named, ready-to-run `ExperimentConfig`s (one module per recipe in `deployments/recipes/`).

Recipe names use hyphens (`gsm8k-qwen`); their modules use underscores (`gsm8k_qwen.py`).
"""

from __future__ import annotations

import importlib

from schemas import ExperimentConfig

RECIPES: tuple[str, ...] = (
    "gsm8k", "arith", "arith-dpo", "smoke", "hello", "gsm8k-qwen", "gsm8k-tinker", "gsm8k-verl-lora", "q20", "gsm8k-tools",
    "serve", "frozenlake", "frozenlake-learn", "sudoku", "rg-countdown", "sciworld", "textworld",
)


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


def load_any(target: str) -> tuple[ExperimentConfig, list[str]]:
    """A config from a recipe name, a Trinity YAML (.yaml/.yml), a JSON dump (.json) or a recipe file (.py).

    A .py recipe file is code: it is executed here, as the CLI's help says. Only the CLI loads files; the
    deployments' parameters (the `rft` flow's `config` and `overrides`) are data and never name a file to load.

    Returns the config and the dotted paths of settings that could not be imported (Trinity YAML only).
    Raises FileNotFoundError, UnknownRecipeError, pydantic.ValidationError or schemas.TrinityImportError.
    """
    import importlib.util
    from pathlib import Path

    from schemas import import_trinity

    path = Path(target)
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".json", ".py"):
        return load_recipe(target), []
    if not path.is_file():
        raise FileNotFoundError(f"{target}: no such file")
    if suffix in (".yaml", ".yml"):
        return import_trinity(path)
    if suffix == ".json":
        return ExperimentConfig.model_validate_json(path.read_text(encoding="utf-8")), []
    spec = importlib.util.spec_from_file_location(f"_rft_recipe_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = getattr(module, "config", None)
    if not isinstance(config, ExperimentConfig):
        raise TypeError(f"{target}: a recipe file must define `config = ExperimentConfig(...)`")
    return config, []
