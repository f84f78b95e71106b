"""`generator:textworld`: seeds and difficulty of TextWorld games (workflow `textworld` makes each game)."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from generators.base import GeneratorArgs


class TextWorldArgs(GeneratorArgs):
    """`generator:textworld`: TextWorld games (workflow `textworld`), one a row: `game_seed` and the difficulty
    (`nb_rooms`, `nb_objects`, `quest_length`). The workflow makes each game with TextWorld's generator (its
    `tw-make` through the Python API, the row's seed and difficulty) the first time it is played and keeps it in
    $RFT_TEXTWORLD_DIR (default ~/.cache/rft/textworld). The `test` split is game seeds seed*100000 + 0 .. test_size-1, `train` the next
    `train_size`: no seed is in both (TextWorld draws a different world, objects and quest from each seed).
    """

    TRAIN_ONLY: ClassVar[frozenset[str]] = frozenset({"train_size"})

    seed: int = Field(0, ge=0, le=20_000, description="Seed of the game seeds.")
    nb_rooms: int = Field(2, ge=1, le=20, description="Rooms of a game (difficulty).")
    nb_objects: int = Field(4, ge=0, le=40, description="Objects of a game besides the rooms (difficulty).")
    quest_length: int = Field(2, ge=1, le=10, description="Actions the quest's shortest walkthrough takes (difficulty).")
    train_size: int = Field(1000, ge=1, le=99_000, description="Games of the train split.")
    test_size: int = Field(20, ge=1, le=1000, description="Games of the test split (held out).")


def textworld(args: TextWorldArgs, split: str) -> list[dict[str, Any]]:
    """Rows {"game_seed", "nb_rooms", "nb_objects", "quest_length"} of the textworld taskset's `split` (workflow
    textworld makes each game from them)."""
    first, size = (0, args.test_size) if split == "test" else (args.test_size, args.train_size)
    return [{"game_seed": args.seed * 100_000 + first + i, "nb_rooms": args.nb_rooms, "nb_objects": args.nb_objects,
             "quest_length": args.quest_length} for i in range(size)]
