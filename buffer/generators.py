"""Rows of generated tasksets (`path: "generator:NAME"`: arith, frozenlake, sudoku, reasoning_gym); their arguments are in
schemas/generators.py, the games' rules in buffer/games.py.

`generate(name, args, split)` returns the split's rows as dicts, the same every time for the same
arguments, so a generated taskset resumes, slices (`test[:100]`) and names its tasks like a file.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from buffer.games import board_text, frozenlake_demonstration, frozenlake_map, shortest_path, sudoku_puzzle, sudoku_solution
from schemas.generators import (
    GENERATOR_ARGS,
    MAX_TEST_SHARE,
    RANGE_FIELD,
    ArithArgs,
    FrozenLakeArgs,
    ReasoningGymArgs,
    SciWorldArgs,
    SudokuArgs,
    TextWorldArgs,
    problem_count,
)

SPLITS = ("train", "test")


def _problems(op: str, operands: tuple[int, int], negative_results: bool) -> list[tuple[int, int]]:
    """Every (a, b) of an operation, in a fixed order (a - b with a >= b unless negative_results)."""
    low, high = operands
    pairs = [(a, b) for a in range(low, high + 1) for b in range(low, high + 1)]
    if op == "-" and not negative_results:
        pairs = [(a, b) for a, b in pairs if a >= b]
    return pairs


def _answer(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def _test_shares(args: ArithArgs) -> dict[str, int]:
    """Held-out problems per operation: equal shares of test_size, each at most a quarter of the
    operation's problems; what a capped operation cannot take goes to the others."""
    caps = {
        op: int(problem_count(op, getattr(args, RANGE_FIELD[op]), args.negative_results) * MAX_TEST_SHARE)
        for op in args.operations
    }
    shares, left = {}, args.test_size
    ordered = sorted(args.operations, key=lambda op: (caps[op], args.operations.index(op)))
    for i, op in enumerate(ordered):
        remaining_ops = len(ordered) - i
        shares[op] = min(caps[op], -(-left // remaining_ops))  # ceil: the first ones take the remainder
        left -= shares[op]
    return {op: shares[op] for op in args.operations}


# The solution styles _columns writes (a product in them is written as tens-ones).
COLUMN_STYLES = ("columns", "columns-compare", "columns-ones")


def _solution(a: int, op: str, b: int, args: ArithArgs) -> str:
    """A worked answer in small steps, ending in \\boxed{}: the SFT warm-up's target. Each step is one a small
    model already gets right more often than the whole sum, in the style args.solution_style:

    tens-ones  the tens, then the ones: `84 - 50 = 34, 34 - 7 = 27`
    columns    digit by digit, ones first, the carry or borrow a step of its own:
               `14 - 7 = 7, 8 - 1 = 7, 7 - 5 = 2, so 84 - 57 = 27` (a product as tens-ones)
    columns-compare  columns, with a difference's ones compared first, so the choice to borrow follows a fact
               written before it: `4 < 7, so 14 - 7 = 7, ...` or `7 >= 4, so 7 - 4 = 3, ...`
    columns-ones  columns-compare, with the two ones digits named before they are compared: `ones 4 and 7: 4 < 7,
               so 14 - 7 = 7, ...`, so the comparison reads two digits just written, not one written and one
               still to be found in the question
    via-ten    the same as tens-ones, but ones that cross a ten go to the ten first (`34 - 4 = 30, 30 - 3 = 27`), and a
               product is written smaller factor first (`3 * 5 = 15, so 5 * 3 = 15`): a held-out product's
               twin is a trained one
    ArithArgs.products_smaller_first writes a product of any style as via-ten does."""
    style, result = args.solution_style, _answer(a, op, b)
    if op == "*" and (style == "via-ten" or args.products_smaller_first):
        return f"{', '.join(_smaller_first(a, b))}. \\boxed{{{result}}}"
    if style == "via-ten":
        steps = ", ".join(_via_ten(a, op, b))
        return f"{steps}. \\boxed{{{result}}}"
    if style in COLUMN_STYLES and op != "*":
        steps = ", ".join(_columns(a, op, b, style))
        return f"{steps}, so {a} {op} {b} = {result}. \\boxed{{{result}}}"
    tens, ones = b - b % 10, b % 10
    if op == "*" or b < 10 or ones == 0:
        steps = f"{a} {op} {b} = {result}."
    elif op == "+":
        steps = f"{a} + {tens} = {a + tens}, {a + tens} + {ones} = {result}."
    else:
        steps = f"{a} - {tens} = {a - tens}, {a - tens} - {ones} = {result}."
    return f"{steps} \\boxed{{{result}}}"


def _columns(a: int, op: str, b: int, style: str) -> list[str]:
    """The equations of a worked answer of a + b or a - b in one of the COLUMN_STYLES (see _solution); a's tens may
    exceed 9. Past `columns`, a difference opens with the ones comparison that decides its borrow."""
    (a_tens, a_ones), (b_tens, b_ones) = divmod(a, 10), divmod(b, 10)
    if op == "+":
        ones = a_ones + b_ones
        steps = [f"{a_ones} + {b_ones} = {ones}", f"{a_tens} + {b_tens} = {a_tens + b_tens}"]
        if ones >= 10:
            steps.append(f"{a_tens + b_tens} + 1 = {a_tens + b_tens + 1}")
        return steps
    borrow = a_ones < b_ones
    if borrow:
        steps = [f"{a_ones + 10} - {b_ones} = {a_ones + 10 - b_ones}", f"{a_tens} - 1 = {a_tens - 1}",
                 f"{a_tens - 1} - {b_tens} = {a_tens - 1 - b_tens}"]
    else:
        steps = [f"{a_ones} - {b_ones} = {a_ones - b_ones}", f"{a_tens} - {b_tens} = {a_tens - b_tens}"]
    if style != "columns":
        named = f"ones {a_ones} and {b_ones}: " if style == "columns-ones" else ""
        steps[0] = f"{named}{a_ones} {'<' if borrow else '>='} {b_ones}, so {steps[0]}"
    return steps


def _smaller_first(a: int, b: int) -> list[str]:
    """A product's equations, smaller factor first: `4 * 8 = 32, so 8 * 4 = 32`."""
    return [f"{b} * {a} = {a * b}", f"so {a} * {b} = {a * b}"] if a > b else [f"{a} * {b} = {a * b}"]


def _via_ten(a: int, op: str, b: int) -> list[str]:
    """The equations of a `via-ten` worked answer of a + b or a - b (see _solution)."""
    sign = 1 if op == "+" else -1
    tens, ones = b - b % 10, b % 10
    steps, at = [], a
    if tens:
        steps.append(f"{at} {op} {tens} = {at + sign * tens}")
        at += sign * tens
    if ones:
        # to the ten first when the ones cross it: 75 + 7 -> 75 + 5 = 80, 80 + 2 = 82; 34 - 7 -> 34 - 4, 30 - 3
        first = (10 - at % 10) if op == "+" else at % 10
        if 0 < first < ones:
            steps.append(f"{at} {op} {first} = {at + sign * first}")
            at, ones = at + sign * first, ones - first
        steps.append(f"{at} {op} {ones} = {at + sign * ones}")
    return steps or [f"{a} {op} {b} = {_answer(a, op, b)}"]


# How far a rejected answer is off: near misses, as a small model's slips are (a carry, a tens digit).
_SLIPS = (-10, -2, -1, 1, 2, 10)


def _rejected(a: int, op: str, b: int, args: ArithArgs) -> str:
    """A worked answer in the solution's form whose last result is wrong (a near miss, never negative, the same for
    the same problem): the rejected side of a preference pair whose chosen side is the solution."""
    result = _answer(a, op, b)
    slips = [d for d in _SLIPS if result + d >= 0]
    wrong = result + random.Random(f"{a}{op}{b}/slip").choice(slips)
    right = _solution(a, op, b, args)
    steps = right.rsplit(" \\boxed{", 1)[0].removesuffix(f"{result}.")
    return f"{steps}{wrong}. \\boxed{{{wrong}}}"


def _row(a: int, op: str, b: int, args: ArithArgs) -> dict[str, Any]:
    return {
        "question": f"What is {a} {op} {b}?", "answer": str(_answer(a, op, b)), "operation": op,
        "solution": _solution(a, op, b, args), "rejected": _rejected(a, op, b, args),
    }


def _in(value: int, bounds: tuple[int, int] | None) -> bool:
    return bounds is None or bounds[0] <= value <= bounds[1]


@lru_cache(maxsize=8)
def _arith_splits(args_json: str) -> dict[str, list[dict[str, Any]]]:
    args = ArithArgs.model_validate_json(args_json)
    shares = _test_shares(args)
    test: list[dict[str, Any]] = []
    pools: dict[str, list[tuple[int, int]]] = {}
    for op in args.operations:
        problems = _problems(op, getattr(args, RANGE_FIELD[op]), args.negative_results)
        random.Random(f"{args.seed}/{op}").shuffle(problems)
        test += [_row(a, op, b, args) for a, b in problems[: shares[op]]]
        pools[op] = [(a, b) for a, b in problems[shares[op] :] if _in(b, args.train_second_operand)]
    random.Random(f"{args.seed}/test").shuffle(test)  # any prefix (test[:100]) mixes the operations
    rng = random.Random(f"{args.seed}/train")
    train = []
    operations = [op for op in args.train_operations or args.operations if pools[op]]
    if not operations:
        raise ValueError(f"train_second_operand {list(args.train_second_operand or ())} leaves no training problem"
                         + (f" of train_operations {args.train_operations}" if args.train_operations else ""))
    for _ in range(args.train_size):
        op = rng.choice(operations)
        a, b = rng.choice(pools[op])
        train.append(_row(a, op, b, args))
    return {"train": train, "test": test}


def arith(args: ArithArgs, split: str) -> list[dict[str, Any]]:
    """Rows {"question", "answer", "operation", "solution", "rejected"} of the arith taskset's `split` (train or
    test): `solution` a worked answer, `rejected` the same with a wrong result (preference pairs, arith-dpo)."""
    return _arith_splits(args.model_dump_json())[split]


def _distinct_splits(kind: str, test_size: int, train_size: int, draw: Callable[[int], dict[str, Any] | None],
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


@lru_cache(maxsize=8)
def _frozenlake_splits(args_json: str) -> dict[str, list[dict[str, Any]]]:
    args = FrozenLakeArgs.model_validate_json(args_json)

    def draw(i: int) -> dict[str, Any] | None:
        rows = frozenlake_map(random.Random(f"{args.seed}/map/{i}"), args.size, args.frozen_prob)
        path = shortest_path(rows)
        if path is None or not args.min_path <= path <= args.max_path:
            return None
        return {"map": "\n".join(rows), "size": args.size, "is_slippery": args.is_slippery, "shortest_path": path}

    return _distinct_splits("frozenlake", args.test_size, args.train_size, draw, "map")


@lru_cache(maxsize=4)
def _frozenlake_demonstrations(args_json: str, split: str) -> list[dict[str, Any]]:
    args = FrozenLakeArgs.model_validate_json(args_json)
    maps = _frozenlake_splits(args.model_copy(update={"demonstrations": 0}).model_dump_json())[split]
    rows = [{"map": row["map"], "shortest_path": row["shortest_path"], "turn": turn, "messages": chat}
            for row in maps for turn, chat in enumerate(frozenlake_demonstration(row["map"].split(), args.demonstrations))]
    random.Random(f"{args.seed}/demonstrations/{split}").shuffle(rows)  # a step's rows from many maps and turns
    return rows


def frozenlake(args: FrozenLakeArgs, split: str) -> list[dict[str, Any]]:
    """Rows {"map", "size", "is_slippery", "shortest_path"} of the frozenlake taskset's `split` (workflow frozenlake);
    with `demonstrations` N, SFT rows {"map", "shortest_path", "turn", "messages"} instead: each move of each map's
    shortest walk, the episode so far as the workflow with max_turns N shows it (buffer.games.frozenlake_demonstration),
    in a shuffled order."""
    if args.demonstrations:
        return _frozenlake_demonstrations(args.model_dump_json(), split)
    return _frozenlake_splits(args.model_dump_json())[split]


@lru_cache(maxsize=8)
def _sudoku_splits(args_json: str) -> dict[str, list[dict[str, Any]]]:
    args = SudokuArgs.model_validate_json(args_json)

    def draw(i: int) -> dict[str, Any]:
        rng = random.Random(f"{args.seed}/sudoku/{i}")
        solution = sudoku_solution(rng, args.size)
        puzzle = sudoku_puzzle(rng, solution, args.blanks)
        return {"puzzle": board_text(puzzle), "solution": board_text(solution), "size": args.size, "blanks": args.blanks}

    return _distinct_splits("sudoku", args.test_size, args.train_size, draw, "puzzle")


def sudoku(args: SudokuArgs, split: str) -> list[dict[str, Any]]:
    """Rows {"puzzle", "solution", "size", "blanks"} of the sudoku taskset's `split` (workflow sudoku)."""
    return _sudoku_splits(args.model_dump_json())[split]


@lru_cache(maxsize=16)
def reasoning_gym_dataset(dataset: str, seed: int, size: int, config_json: str) -> Any:
    """reasoning-gym's dataset `dataset` made with these settings (its items are item i of Random(seed + i))."""
    import reasoning_gym

    return reasoning_gym.create_dataset(dataset, seed=seed, size=size, **json.loads(config_json))


@lru_cache(maxsize=4096)
def reasoning_gym_entry(source: str) -> tuple[Any, dict[str, Any]]:
    """(dataset, entry) of a row's `reasoning_gym` column (JSON: dataset, seed, size, config, index): the entry
    regenerated as the generator made it, what the dataset's own verifier (`score_answer`) reads."""
    spec = json.loads(source)
    ds = reasoning_gym_dataset(spec["dataset"], spec["seed"], spec["size"], json.dumps(spec["config"], sort_keys=True))
    return ds, ds[spec["index"]]


@lru_cache(maxsize=8)
def _reasoning_gym_splits(args_json: str) -> dict[str, list[dict[str, Any]]]:
    args = ReasoningGymArgs.model_validate_json(args_json)
    size = 50 * (args.test_size + args.train_size) + 10_000  # the draws allowed; also the dataset's virtual size
    config_json = json.dumps(args.config, sort_keys=True)
    ds = reasoning_gym_dataset(args.dataset, args.seed, size, config_json)
    test: list[dict[str, Any]] = []
    train: list[dict[str, Any]] = []
    held_out: set[str] = set()
    for index in range(size):
        try:
            entry = ds[index]
        except Exception as exc:  # noqa: BLE001 - e.g. countdown finding no expression within the target's range
            raise ValueError(f"generator:reasoning_gym: {args.dataset} could not make entry {index} with config "
                             f"{args.config}: {exc}") from exc
        question = entry["question"]
        if len(test) < args.test_size:
            if question in held_out:
                continue
            held_out.add(question)
            split = test
        elif question in held_out:
            continue
        else:
            split = train
        source = {"dataset": args.dataset, "seed": args.seed, "size": size, "config": args.config, "index": index}
        split.append({
            "question": question, "answer": str(entry["answer"]), "dataset": args.dataset, "index": index,
            "metadata": json.dumps(entry.get("metadata", {}), default=str),
            "reasoning_gym": json.dumps(source, sort_keys=True),
        })
        if len(train) == args.train_size:
            return {"test": test, "train": train}
    raise ValueError(f"generator:reasoning_gym found {len(test)} distinct test questions and {len(train)} train rows in "
                     f"{size} entries of {args.dataset}, {args.test_size} + {args.train_size} needed: allow more (a harder "
                     "config) or ask for fewer")


def reasoning_gym(args: ReasoningGymArgs, split: str) -> list[dict[str, Any]]:
    """Rows {"question", "answer", "dataset", "index", "metadata", "reasoning_gym"} of the reasoning-gym taskset's
    `split` (reward reasoning_gym_reward scores an answer with the dataset's own verifier)."""
    return _reasoning_gym_splits(args.model_dump_json())[split]


@lru_cache(maxsize=8)
def sciworld_variations(tasks: tuple[str, ...]) -> dict[str, tuple[list[int], list[int]]]:
    """{task: (its train variations, its test variations)}, ScienceWorld's own split (starts its simulator, Java)."""
    from scienceworld import ScienceWorldEnv

    env = ScienceWorldEnv("")
    try:
        out = {}
        for task in tasks:
            env.load(task, 0, "")
            out[task] = (list(env.get_variations_train()), list(env.get_variations_test()))
        return out
    finally:
        env.close()


@lru_cache(maxsize=8)
def _sciworld_splits(args_json: str) -> dict[str, list[dict[str, Any]]]:
    args = SciWorldArgs.model_validate_json(args_json)
    splits: dict[str, list[dict[str, Any]]] = {"train": [], "test": []}
    for task, (train, test) in sciworld_variations(tuple(args.tasks)).items():
        for split, variations, n in (("train", train, args.train_per_task), ("test", test, args.test_per_task)):
            chosen = sorted(variations)
            random.Random(f"{args.seed}/{task}/{split}").shuffle(chosen)
            splits[split] += [{"task_name": task, "variation": v, "simplification": args.simplification}
                              for v in chosen[:n]]
    for split, rows in splits.items():  # any prefix (test[:4]) mixes the tasks
        random.Random(f"{args.seed}/{split}").shuffle(rows)
    return splits


def sciworld(args: SciWorldArgs, split: str) -> list[dict[str, Any]]:
    """Rows {"task_name", "variation", "simplification"} of the sciworld taskset's `split`: variations of ScienceWorld's
    own train or test set (workflow sciworld)."""
    return _sciworld_splits(args.model_dump_json())[split]


def textworld(args: TextWorldArgs, split: str) -> list[dict[str, Any]]:
    """Rows {"game_seed", "nb_rooms", "nb_objects", "quest_length"} of the textworld taskset's `split` (workflow
    textworld makes each game from them)."""
    first, size = (0, args.test_size) if split == "test" else (args.test_size, args.train_size)
    return [{"game_seed": args.seed * 100_000 + first + i, "nb_rooms": args.nb_rooms, "nb_objects": args.nb_objects,
             "quest_length": args.quest_length} for i in range(size)]


GENERATORS: dict[str, Callable[[Any, str], list[dict[str, Any]]]] = {
    "arith": arith, "frozenlake": frozenlake, "sudoku": sudoku, "reasoning_gym": reasoning_gym,
    "sciworld": sciworld, "textworld": textworld,
}


def generate(name: str, args: dict[str, Any], split: str) -> list[dict[str, Any]]:
    """The rows of split `split` of generator `name` (ValueError naming what is wrong)."""
    if name not in GENERATORS:
        raise ValueError(f"unknown generator {name!r}; known: {sorted(GENERATORS)}")
    if split not in SPLITS:
        raise ValueError(f"generator:{name} has splits {', '.join(SPLITS)}; got {split!r}")
    return GENERATORS[name](GENERATOR_ARGS[name].model_validate(args), split)
