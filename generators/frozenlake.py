"""`generator:frozenlake`: FrozenLake maps of a difficulty (workflow `frozenlake`), or shortest walks of them as SFT rows."""

from __future__ import annotations

import random
from functools import lru_cache
from typing import Any, ClassVar

from pydantic import Field, model_validator

from generators.base import GeneratorArgs, distinct_splits
from generators.games import frozenlake_demonstration, frozenlake_map, shortest_path


class FrozenLakeArgs(GeneratorArgs):
    """`generator:frozenlake`: FrozenLake maps (workflow `frozenlake`), one a row: `map` (rows of S start, F frozen,
    H hole, G goal, one a line), `size`, `is_slippery`, `shortest_path` (the fewest moves from S to G).

    Map i of a seed is drawn from its own random stream: each cell a hole with probability 1 - frozen_prob, S and G
    on two different cells anywhere; a map is kept when G can be reached in `min_path` to `max_path` moves (the
    difficulty) and it is not already taken. The `test` split is the first `test_size` maps, `train` the next
    `train_size`: no map is in both. With `demonstrations` the rows are shortest walks of those maps, one a move.
    """

    TRAIN_ONLY: ClassVar[frozenset[str]] = frozenset({"train_size", "demonstrations", "goal_hint"})

    seed: int = Field(0, description="Seed of the maps.")
    size: int = Field(4, ge=2, le=12, description="Rows (and columns) of a map.")
    frozen_prob: float = Field(0.8, gt=0.0, le=1.0, description="Probability that a cell is frozen (else a hole).")
    min_path: int = Field(1, ge=1, description="Fewest moves from S to G of a kept map, at least (difficulty).")
    max_path: int = Field(6, ge=1, description="Fewest moves from S to G of a kept map, at most (difficulty).")
    is_slippery: bool = Field(False, description="gymnasium's slippery ice: a move may go sideways (workflow_args."
                              "is_slippery overrides it per taskset).")
    train_size: int = Field(1000, ge=1, description="Maps of the train split.")
    test_size: int = Field(50, ge=1, description="Maps of the test split (held out).")
    demonstrations: int = Field(0, ge=0, le=100, description="0: one row a map. N: SFT rows instead, one a move of "
                                "each map's shortest walk: `messages`, the episode so far as the frozenlake workflow "
                                "with max_turns N shows it, ending with that move (the same maps; an SFT warm-up's "
                                "data).")
    goal_hint: bool = Field(False, description="With `demonstrations`: the episode as the workflow shows it with "
                                 "workflow_args.goal_hint (where the goal lies from the player, under each map). "
                                 "Set both alike.")

    @model_validator(mode="after")
    def _path_range(self) -> FrozenLakeArgs:
        if self.min_path > self.max_path:
            raise ValueError(f"min_path {self.min_path} > max_path {self.max_path}")
        if self.min_path > 2 * (self.size - 1):
            raise ValueError(f"min_path {self.min_path}: no path on a {self.size}x{self.size} map is longer than "
                             f"{2 * (self.size - 1)} moves without detours; lower it or widen the map")
        return self


@lru_cache(maxsize=8)
def _frozenlake_splits(args_json: str) -> dict[str, list[dict[str, Any]]]:
    args = FrozenLakeArgs.model_validate_json(args_json)

    def draw(i: int) -> dict[str, Any] | None:
        rows = frozenlake_map(random.Random(f"{args.seed}/map/{i}"), args.size, args.frozen_prob)
        path = shortest_path(rows)
        if path is None or not args.min_path <= path <= args.max_path:
            return None
        return {"map": "\n".join(rows), "size": args.size, "is_slippery": args.is_slippery, "shortest_path": path}

    return distinct_splits("frozenlake", args.test_size, args.train_size, draw, "map")


@lru_cache(maxsize=4)
def _frozenlake_demonstrations(args_json: str, split: str) -> list[dict[str, Any]]:
    args = FrozenLakeArgs.model_validate_json(args_json)
    maps = _frozenlake_splits(args.model_copy(update={"demonstrations": 0, "goal_hint": False}).model_dump_json())[split]
    rows = [{"map": row["map"], "shortest_path": row["shortest_path"], "turn": turn, "messages": chat}
            for row in maps
            for turn, chat in enumerate(frozenlake_demonstration(row["map"].split(), args.demonstrations,
                                                                 args.goal_hint))]
    random.Random(f"{args.seed}/demonstrations/{split}").shuffle(rows)  # a step's rows from many maps and turns
    return rows


def frozenlake(args: FrozenLakeArgs, split: str) -> list[dict[str, Any]]:
    """Rows {"map", "size", "is_slippery", "shortest_path"} of the frozenlake taskset's `split` (workflow frozenlake);
    with `demonstrations` N, SFT rows {"map", "shortest_path", "turn", "messages"} instead: each move of each map's
    shortest walk, the episode so far as the workflow with max_turns N shows it (generators.games.frozenlake_demonstration),
    in a shuffled order."""
    if args.demonstrations:
        return _frozenlake_demonstrations(args.model_dump_json(), split)
    return _frozenlake_splits(args.model_dump_json())[split]
