"""`generator:arith`: "What is a OP b?" with worked answers and near misses (the arith recipes' tasks, SFT rows and
preference pairs)."""

from __future__ import annotations

import random
from functools import lru_cache
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from generators.base import GeneratorArgs

Operation = Literal["+", "-", "*"]
# Held-out problems take at most this share of an operation's problems: training keeps the rest.
MAX_TEST_SHARE = 0.25


class ArithArgs(GeneratorArgs):
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
