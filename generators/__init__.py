"""Generated tasksets: `path: "generator:NAME"` with the generator's arguments in `generator_args`.

A generator makes its rows in memory from its arguments (no file to ship or download), the same every time for the
same arguments, so a generated taskset resumes, slices (`test[:100]`) and names its tasks like a file. Each is one
module holding the model of its arguments and its rows, registered once below: the schema checks `generator_args`
against that model and completes it with its defaults like an algorithm function's `*_args` (schemas/rules_buffer.py),
so a bad argument is an error naming `...generator_args.FIELD`. The games' rules (FrozenLake, Sudoku) are in
generators/games.py, which their workflows share. Like algorithms/, this package imports nothing of the project's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from generators import arith, frozenlake, reasoning_gym, sciworld, sudoku, textworld
from generators.base import GeneratorArgs

GENERATOR_PREFIX = "generator:"
SPLITS = ("train", "test")


@dataclass(frozen=True)
class Generator:
    args: type[GeneratorArgs]
    rows: Callable[[Any, str], list[dict[str, Any]]]  # (its arguments, a split) -> the split's rows


GENERATORS: dict[str, Generator] = {
    "arith": Generator(arith.ArithArgs, arith.arith),
    "frozenlake": Generator(frozenlake.FrozenLakeArgs, frozenlake.frozenlake),
    "sudoku": Generator(sudoku.SudokuArgs, sudoku.sudoku),
    "reasoning_gym": Generator(reasoning_gym.ReasoningGymArgs, reasoning_gym.reasoning_gym),
    "sciworld": Generator(sciworld.SciWorldArgs, sciworld.sciworld),
    "textworld": Generator(textworld.TextWorldArgs, textworld.textworld),
}
# Generator name → the model of its arguments.
GENERATOR_ARGS: dict[str, type[GeneratorArgs]] = {name: g.args for name, g in GENERATORS.items()}


def generate(name: str, args: dict[str, Any], split: str) -> list[dict[str, Any]]:
    """The rows of split `split` of generator `name` (ValueError naming what is wrong)."""
    if name not in GENERATORS:
        raise ValueError(f"unknown generator {name!r}; known: {sorted(GENERATORS)}")
    if split not in SPLITS:
        raise ValueError(f"generator:{name} has splits {', '.join(SPLITS)}; got {split!r}")
    return GENERATORS[name].rows(GENERATORS[name].args.model_validate(args), split)


def same_held_out(name: str, train_args: dict[str, Any], eval_args: dict[str, Any]) -> bool:
    """Whether generator `name` holds out the same test problems for both argument sets (its TRAIN_ONLY arguments
    aside), so that training on the first's train split never sees the second's test split."""
    train_only = GENERATOR_ARGS[name].TRAIN_ONLY if name in GENERATOR_ARGS else frozenset()
    return {k: v for k, v in train_args.items() if k not in train_only} == {
        k: v for k, v in eval_args.items() if k not in train_only}


def generator_name(path: str | None) -> str | None:
    """"arith" for path "generator:arith"; None for a path that is not a generator."""
    if path and path.startswith(GENERATOR_PREFIX):
        return path.removeprefix(GENERATOR_PREFIX)
    return None
