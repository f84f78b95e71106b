"""`generator:sudoku`: Sudoku puzzles of a difficulty (workflow `sudoku`)."""

from __future__ import annotations

import random
from functools import lru_cache
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from generators.base import GeneratorArgs, distinct_splits
from generators.games import board_text, sudoku_puzzle, sudoku_solution


class SudokuArgs(GeneratorArgs):
    """`generator:sudoku`: Sudoku puzzles (workflow `sudoku`), one a row: `puzzle` and `solution` (rows of digits, 0
    for an empty cell, one a line), `size`, `blanks`.

    Puzzle i of a seed is drawn from its own random stream: a solved board (the pattern board with its digits
    relabelled, its bands, stacks, rows and columns shuffled) with `blanks` distinct cells emptied (the difficulty).
    The `test` split is the first `test_size` distinct puzzles, `train` the next `train_size`: no puzzle is in both.
    A puzzle may have more than one completion; the workflow accepts any that keeps the rules.
    """

    TRAIN_ONLY: ClassVar[frozenset[str]] = frozenset({"train_size"})

    seed: int = Field(0, description="Seed of the puzzles.")
    size: Literal[4, 9] = Field(4, description="Rows (and columns) of a board: 4 (2x2 boxes) or 9 (3x3 boxes).")
    blanks: int = Field(4, ge=1, description="Empty cells of a puzzle (difficulty); at most size x size.")
    train_size: int = Field(1000, ge=1, description="Puzzles of the train split.")
    test_size: int = Field(50, ge=1, description="Puzzles of the test split (held out).")

    @model_validator(mode="after")
    def _blanks_fit(self) -> SudokuArgs:
        if self.blanks > self.size * self.size:
            raise ValueError(f"{self.blanks} blanks on a {self.size}x{self.size} board of {self.size * self.size} cells")
        return self


@lru_cache(maxsize=8)
def _sudoku_splits(args_json: str) -> dict[str, list[dict[str, Any]]]:
    args = SudokuArgs.model_validate_json(args_json)

    def draw(i: int) -> dict[str, Any]:
        rng = random.Random(f"{args.seed}/sudoku/{i}")
        solution = sudoku_solution(rng, args.size)
        puzzle = sudoku_puzzle(rng, solution, args.blanks)
        return {"puzzle": board_text(puzzle), "solution": board_text(solution), "size": args.size, "blanks": args.blanks}

    return distinct_splits("sudoku", args.test_size, args.train_size, draw, "puzzle")


def sudoku(args: SudokuArgs, split: str) -> list[dict[str, Any]]:
    """Rows {"puzzle", "solution", "size", "blanks"} of the sudoku taskset's `split` (workflow sudoku)."""
    return _sudoku_splits(args.model_dump_json())[split]
