"""What every generator shares: its arguments' base class, and distinct train and test rows drawn one by one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict


class GeneratorArgs(BaseModel):
    """A generator's arguments (`generator_args`): unknown keys are errors, each field has a description."""

    model_config = ConfigDict(extra="forbid")
    # Arguments that shape only the train split: an eval taskset may differ in them and still hold out the same rows.
    TRAIN_ONLY: ClassVar[frozenset[str]] = frozenset()


def distinct_splits(kind: str, test_size: int, train_size: int, draw: Callable[[int], dict[str, Any] | None],
                     key: str) -> dict[str, list[dict[str, Any]]]:
    """The first `test_size` distinct rows of draw(0), draw(1), ... as `test`, the next `train_size` as `train` (draw
    returns None for a puzzle it does not keep; rows are told apart by row[key]). ValueError when the draws run
    dry: the arguments allow too few distinct puzzles."""
    rows: list[dict[str, Any]] = []
    seen: set[Any] = set()
    need, limit = test_size + train_size, 50 * (test_size + train_size) + 10_000
    for i in range(limit):
        row = draw(i)
        if row is not None and row[key] not in seen:
            seen.add(row[key])
            rows.append(row)
            if len(rows) == need:
                return {"test": rows[:test_size], "train": rows[test_size:]}
    raise ValueError(f"generator:{kind} found {len(rows)} distinct puzzles in {limit} draws, {need} needed "
                     f"(test_size + train_size): allow more (a larger board, another difficulty) or ask for fewer")
