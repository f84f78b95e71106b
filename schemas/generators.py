"""Generated tasksets (arith, frozenlake, sudoku, reasoning_gym, sciworld, textworld): `path: "generator:NAME"` with the generator's
arguments in `generator_args`.

A generator makes its rows in memory from its arguments (no file to ship or download); the arguments
are checked and completed with their defaults like an algorithm function's `*_args` (schemas/rules.py),
so a bad one is an error naming `...generator_args.FIELD`. The rows come from `buffer/generators.py`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from schemas.base import Section

GENERATOR_PREFIX = "generator:"
Operation = Literal["+", "-", "*"]
# Held-out problems take at most this share of an operation's problems: training keeps the rest.
MAX_TEST_SHARE = 0.25


class ArithArgs(Section):
    """`generator:arith`: "What is a OP b?" with the answer required in \\boxed{}.

    Splits `train` and `test` never share a question. The test split holds `test_size` problems, shared
    equally among the operations, except that at most a quarter of an operation's possible problems are
    held out (with the default 0-9 operands, 25 of the 100 products); the rest of the share goes to the
    other operations. The train split holds `train_size` problems drawn, with repeats, from the problems
    not held out: an operation uniformly, then one of its problems uniformly.
    """

    # Arguments that shape only the train split: an eval taskset may differ in them and still hold out the same problems.
    TRAIN_ONLY: ClassVar[frozenset[str]] = frozenset(
        {"train_size", "train_second_operand", "train_operations", "solution_style", "products_smaller_first"})

    seed: int = Field(0, description="Seed of which problems are held out and of the train split's order.")
    operations: list[Operation] = Field(["+", "-", "*"], min_length=1, description="Operations: +, -, *.")
    add_range: tuple[int, int] = Field((0, 99), description="Smallest and largest operand of +.")
    sub_range: tuple[int, int] = Field((0, 99), description="Smallest and largest operand of -.")
    mul_range: tuple[int, int] = Field((0, 9), description="Smallest and largest operand of *.")
    negative_results: bool = Field(False, description="Allow a - b with b > a (else the larger operand comes first).")
    train_size: int = Field(5000, ge=1, description="Rows of the train split.")
    test_size: int = Field(300, ge=1, description="Rows of the test split (held-out problems).")
    solution_style: Literal["tens-ones", "columns", "columns-compare", "columns-ones", "via-ten"] = Field(
        "tens-ones",
        description="The worked answers (the `solution` and `rejected` columns): 'tens-ones' adds or takes the tens, "
        "then the ones (`84 - 50 = 34, 34 - 7 = 27`); 'columns' goes digit by digit, ones first, with the carry or borrow a step of "
        "its own (`14 - 7 = 7, 8 - 1 = 7, 7 - 5 = 2, so 84 - 57 = 27`); 'columns-compare' is 'columns' with a difference's "
        "ones compared first, so the borrow follows a written fact (`4 < 7, so 14 - 7 = 7, ...`, `7 >= 4, so 7 - 4 = 3, ...`); "
        "'columns-ones' is 'columns-compare' with the two ones digits named before they are compared "
        "(`ones 4 and 7: 4 < 7, so 14 - 7 = 7, ...`); "
        "'via-ten' goes to the ten first when the ones cross it "
        "(`34 - 4 = 30, 30 - 3 = 27`) and writes a product smaller factor first (`3 * 5 = 15, so 5 * 3 = 15`).",
    )
    products_smaller_first: bool = Field(
        False,
        description="Write a product's worked answer smaller factor first (`4 * 8 = 32, so 8 * 4 = 32`), as 'via-ten' "
        "always does: a held-out product whose twin (b * a) is trained is then answered from the trained fact.",
    )
    train_second_operand: tuple[int, int] | None = Field(
        None,
        description="Train split only: draw only problems whose second operand is in this range, e.g. [0, 9] to "
        "drill the one-digit last step of the worked answers. The test split is the same as without it.",
    )

    train_operations: list[Operation] | None = Field(
        None,
        description="Train split only: draw only problems of these operations (some of `operations`), e.g. [\"+\", \"-\"] "
        "to leave out the products, which the train split repeats until they are learnt by heart while the held-out "
        "ones are other facts. The test split is the same as without it.",
    )

    @field_validator("operations")
    @classmethod
    def _distinct(cls, ops: list[str]) -> list[str]:
        if len(set(ops)) != len(ops):
            raise ValueError(f"an operation is listed twice: {ops}")
        return ops

    @field_validator("add_range", "sub_range", "mul_range", "train_second_operand")
    @classmethod
    def _range(cls, value: tuple[int, int] | None) -> tuple[int, int] | None:
        if value is None:
            return value
        low, high = value
        if low < 0 or high < low:
            raise ValueError(f"need 0 <= smallest <= largest, got [{low}, {high}]")
        return value

    @field_validator("test_size")
    @classmethod
    def _enough_problems(cls, test_size: int, info: ValidationInfo) -> int:
        ops, data = info.data.get("operations"), info.data
        if not ops or any(f"{name}_range" not in data for name in ("add", "sub", "mul")):
            return test_size  # an earlier field is already wrong
        counts = {op: problem_count(op, data[RANGE_FIELD[op]], data.get("negative_results", False)) for op in ops}
        room = sum(int(n * MAX_TEST_SHARE) for n in counts.values())
        if test_size > room:
            raise ValueError(
                f"{test_size} held-out problems, but at most {room} can be held out of "
                + ", ".join(f"{n} {op} problems" for op, n in counts.items())
                + " (a quarter of each operation's): widen the operand ranges or hold out fewer"
            )
        return test_size

    @model_validator(mode="after")
    def _train_operations_are_operations(self) -> ArithArgs:
        extra = [op for op in self.train_operations or () if op not in self.operations]
        if extra:
            raise ValueError(f"train_operations {extra} are not among the operations {self.operations}")
        return self

    @model_validator(mode="after")
    def _second_operand_in_a_range(self) -> ArithArgs:
        if self.train_second_operand is not None:
            low, high = self.train_second_operand
            ranges = [getattr(self, RANGE_FIELD[op]) for op in self.operations]
            if not any(low <= r_high and r_low <= high for r_low, r_high in ranges):
                raise ValueError(f"train_second_operand {[low, high]} is outside every operation's operand range "
                                 f"({', '.join(f'{op} {list(r)}' for op, r in zip(self.operations, ranges))}): no problem to train on")
        return self


RANGE_FIELD = {"+": "add_range", "-": "sub_range", "*": "mul_range"}


def problem_count(op: str, operands: tuple[int, int], negative_results: bool = False) -> int:
    """How many distinct questions an operation has over its operand range (ordered pairs)."""
    n = operands[1] - operands[0] + 1
    return n * (n + 1) // 2 if op == "-" and not negative_results else n * n


class FrozenLakeArgs(Section):
    """`generator:frozenlake`: FrozenLake maps (workflow `frozenlake`), one a row: `map` (rows of S start, F frozen,
    H hole, G goal, one a line), `size`, `is_slippery`, `shortest_path` (the fewest moves from S to G).

    Map i of a seed is drawn from its own random stream: each cell a hole with probability 1 - frozen_prob, S and G
    on two different cells anywhere; a map is kept when G can be reached in `min_path` to `max_path` moves (the
    difficulty) and it is not already taken. The `test` split is the first `test_size` maps, `train` the next
    `train_size`: no map is in both. With `demonstrations` the rows are shortest walks of those maps, one a move.
    """

    TRAIN_ONLY: ClassVar[frozenset[str]] = frozenset({"train_size", "demonstrations"})

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

    @model_validator(mode="after")
    def _path_range(self) -> FrozenLakeArgs:
        if self.min_path > self.max_path:
            raise ValueError(f"min_path {self.min_path} > max_path {self.max_path}")
        if self.min_path > 2 * (self.size - 1):
            raise ValueError(f"min_path {self.min_path}: no path on a {self.size}x{self.size} map is longer than "
                             f"{2 * (self.size - 1)} moves without detours; lower it or widen the map")
        return self


class SudokuArgs(Section):
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


# Settings of a reasoning-gym dataset that generator_args sets itself (not in `config`).
REASONING_GYM_OWN = ("seed", "size")


def reasoning_gym_config(dataset: str) -> type:
    """The config dataclass of reasoning-gym dataset `dataset` (ValueError naming the known ones)."""
    from reasoning_gym.factory import DATASETS  # ~1 s to import: only when a reasoning_gym taskset is checked

    if dataset not in DATASETS or dataset == "composite":
        known = sorted(n for n in DATASETS if n != "composite")
        raise ValueError(f"reasoning-gym has no dataset {dataset!r}; its datasets: {', '.join(known)}")
    return DATASETS[dataset][1]


class ReasoningGymArgs(Section):
    """`generator:reasoning_gym`: the procedural tasks of reasoning-gym (countdown, basic_arithmetic, leg_counting,
    ... one dataset a taskset), one a row: `question`, `answer` (one right answer), `dataset`, `index`, `metadata` (JSON,
    to read) and `reasoning_gym` (JSON: dataset, seed, size, config, index: what the reward regenerates the entry from
    to score an answer with the dataset's own verifier, reward `reasoning_gym_reward`).

    `config` holds the dataset's own settings (its difficulty: countdown's min_numbers, max_target, ...), passed to
    its config class and checked by it: a key the class does not have is an error naming it. Entry i of a seed is
    reasoning-gym's item i; the `test` split is the first `test_size` distinct questions, `train` the next
    `train_size` items whose question is not in `test` (a question may repeat in `train` when the dataset has few).
    """

    TRAIN_ONLY: ClassVar[frozenset[str]] = frozenset({"train_size"})

    dataset: str = Field(..., description="The reasoning-gym dataset, e.g. countdown, basic_arithmetic, leg_counting.")
    config: dict[str, Any] = Field({}, description="The dataset's own settings (its config class's fields, e.g. "
                                   "countdown's min_numbers, max_numbers, max_target): the difficulty.")
    seed: int = Field(0, description="Seed of the entries.")
    train_size: int = Field(1000, ge=1, description="Rows of the train split.")
    test_size: int = Field(100, ge=1, description="Rows of the test split (held out).")

    @field_validator("dataset")
    @classmethod
    def _known(cls, dataset: str) -> str:
        reasoning_gym_config(dataset)
        return dataset

    @field_validator("config")
    @classmethod
    def _settings(cls, config: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        import dataclasses

        dataset = info.data.get("dataset")
        if dataset is None:
            return config  # the dataset is already wrong
        config_cls = reasoning_gym_config(dataset)
        fields = [f.name for f in dataclasses.fields(config_cls) if f.name not in REASONING_GYM_OWN]
        for key in config:
            if key in REASONING_GYM_OWN:
                raise ValueError(f"config.{key}: set generator_args.{'seed' if key == 'seed' else 'train_size/test_size'}"
                                 " instead")
            if key not in fields:
                raise ValueError(f"config.{key}: reasoning-gym's {dataset} has no setting {key!r}; its settings "
                                 f"({config_cls.__name__}): {', '.join(fields)}")
        try:
            made = config_cls(**config)
            if hasattr(made, "validate"):
                made.validate()
        except (AssertionError, TypeError, ValueError) as exc:
            raise ValueError(f"config: reasoning-gym's {config_cls.__name__} refuses {config}: {exc}") from None
        return config


class SciWorldArgs(Section):
    """`generator:sciworld`: ScienceWorld tasks (workflow `sciworld`), one a row: `task_name`, `variation` (ScienceWorld's
    variation number of that task), `simplification`.

    The split is ScienceWorld's own: `train` rows are variations of its train set, `test` rows variations of its test
    set (never the same variation), the first `train_per_task` / `test_per_task` of each task's list shuffled by
    `seed`. Listing a task's variations starts ScienceWorld's simulator (Java) once per taskset.
    """

    TRAIN_ONLY: ClassVar[frozenset[str]] = frozenset({"train_per_task"})

    seed: int = Field(0, description="Seed of which variations are taken (each task's list is shuffled by it).")
    tasks: list[str] = Field(["find-living-thing", "find-non-living-thing", "find-plant"], min_length=1,
                             description="ScienceWorld task names (its task list: boil, melt, find-animal, ...).")
    train_per_task: int = Field(10, ge=1, description="Variations of each task in the train split (at most its train set).")
    test_per_task: int = Field(3, ge=1, description="Variations of each task in the test split (at most its test set).")
    simplification: str = Field("easy", description="ScienceWorld's simplifications, e.g. 'easy' (teleport, open doors, "
                                "self-watering flower pots, no electrical actions) or '' for none, or a comma list.")

    @field_validator("tasks")
    @classmethod
    def _known_tasks(cls, tasks: list[str]) -> list[str]:
        try:
            from scienceworld.constants import ID2TASK
        except ImportError:  # checked when the rows are made
            return tasks
        known = sorted(ID2TASK.values())
        unknown = [t for t in tasks if t not in known]
        if unknown:
            raise ValueError(f"unknown ScienceWorld task(s) {unknown}; its tasks: {', '.join(known)}")
        if len(set(tasks)) != len(tasks):
            raise ValueError(f"a task is listed twice: {tasks}")
        return tasks


class TextWorldArgs(Section):
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


# Generator name → the model of its arguments.
GENERATOR_ARGS: dict[str, type[Section]] = {
    "arith": ArithArgs, "frozenlake": FrozenLakeArgs, "sudoku": SudokuArgs, "reasoning_gym": ReasoningGymArgs,
    "sciworld": SciWorldArgs, "textworld": TextWorldArgs,
}


def same_held_out(name: str, train_args: dict[str, Any], eval_args: dict[str, Any]) -> bool:
    """Whether generator `name` holds out the same test problems for both argument sets (its TRAIN_ONLY arguments
    aside), so that training on the first's train split never sees the second's test split."""
    train_only = getattr(GENERATOR_ARGS.get(name), "TRAIN_ONLY", frozenset())
    return {k: v for k, v in train_args.items() if k not in train_only} == {
        k: v for k, v in eval_args.items() if k not in train_only}


def generator_name(path: str | None) -> str | None:
    """"arith" for path "generator:arith"; None for a path that is not a generator."""
    if path and path.startswith(GENERATOR_PREFIX):
        return path.removeprefix(GENERATOR_PREFIX)
    return None
