"""The generated `arith` taskset: disjoint splits, fixed by the seed, answers right, arguments checked by the
schema with the field named, and read through the ordinary taskset loader (slicing, task ids)."""

from __future__ import annotations

from collections import Counter

import pytest
from pydantic import ValidationError

from buffer.taskset import TasksetError, load_taskset
from deployments import load_recipe
from generators import generate
from generators.arith import ArithArgs, arith
from schemas import TasksetConfig, error_items
from workflows.math_workflow import score_math


def questions(rows: list[dict]) -> set[str]:
    return {r["question"] for r in rows}


def test_default_splits_are_disjoint_and_mix_the_operations():
    args = ArithArgs()
    train, test = arith(args, "train"), arith(args, "test")
    assert (len(train), len(test)) == (5000, 300)
    assert not questions(train) & questions(test)
    assert len(questions(test)) == 300  # no repeats among held-out problems
    # equal shares, but at most a quarter of the 100 products held out: the rest goes to + and -
    assert Counter(r["operation"] for r in test) == {"+": 137, "-": 138, "*": 25}
    assert set(Counter(r["operation"] for r in test[:30])) == {"+", "-", "*"}  # any prefix mixes them
    assert {r["operation"] for r in train} == {"+", "-", "*"}


def test_answers_operands_and_seed():
    args = ArithArgs(add_range=(10, 20), sub_range=(0, 9), mul_range=(2, 5), train_size=400, test_size=20)
    for row in arith(args, "train") + arith(args, "test"):
        a, op, b = row["question"].removeprefix("What is ").removesuffix("?").split()
        a, b = int(a), int(b)
        assert int(row["answer"]) == {"+": a + b, "-": a - b, "*": a * b}[op]
        low, high = {"+": (10, 20), "-": (0, 9), "*": (2, 5)}[op]
        assert low <= a <= high and low <= b <= high
        assert op != "-" or a >= b  # negative_results off: the larger operand first
    assert arith(args, "test") == arith(ArithArgs.model_validate(args.model_dump()), "test")  # fixed by the seed
    assert arith(args.model_copy(update={"seed": 1}), "test") != arith(args, "test")


def test_loaded_like_a_file_with_slices_and_stable_ids():
    taskset = TasksetConfig(name="arith", path="generator:arith", split="test[:10]",
                            format={"prompt_key": "question", "response_key": "answer"},
                            default_workflow_type="math_workflow")
    tasks = load_taskset(taskset)
    assert [t.task_id for t in tasks] == [f"arith/test/{i}" for i in range(10)]
    assert [t.raw for t in tasks] == generate("arith", {}, "test")[:10]
    with pytest.raises(TasksetError, match="generator:arith has splits train, test; got 'validation'"):
        load_taskset(taskset.model_copy(update={"split": "validation"}))
    with pytest.raises(TasksetError, match="mul_range"):
        load_taskset(taskset.model_copy(update={"generator_args": {"mul_range": [3, 1]}}))


@pytest.mark.parametrize(("path", "value", "message"), [
    ("buffer.explorer_input.taskset.generator_args.mul_range", [9, 0], "need 0 <= smallest <= largest"),
    ("buffer.explorer_input.taskset.generator_args.test_size", 5000, "at most 3787 can be held out"),
    ("buffer.explorer_input.taskset.generator_args.digits", 2, "generator 'arith' has no argument 'digits'"),
    ("buffer.explorer_input.taskset.generator_args.operations", ["/"], "Input should be"),
    ("buffer.explorer_input.eval_tasksets.0.path", "generator:nope", "unknown generator 'nope'"),
])
def test_bad_arguments_are_errors_naming_the_field(path: str, value: object, message: str):
    with pytest.raises(ValidationError) as info:
        load_recipe("arith").with_overrides({path: value})
    (where, msg), *_ = error_items(info.value)
    assert where.startswith(path) and message in msg, (where, msg)


def test_recipe_defaults_are_filled_in_and_different_arguments_warn():
    config = load_recipe("arith")
    # the RL problems come from a longer train split (20,000 rows) than the warm-up's, sums and differences only
    assert config.buffer.explorer_input.taskset.generator_args == ArithArgs(
        train_size=20000, train_operations=["+", "-"]).model_dump(mode="json")
    assert "buffer.explorer_input.taskset.generator_args.mul_range" in config.derived
    changed = config.with_overrides({"buffer.explorer_input.taskset.generator_args.mul_range": [0, 12]})
    assert any("may be trained on" in w for w in changed.warnings)
    with pytest.raises(ValidationError, match="only a generated taskset"):
        load_recipe("gsm8k").with_overrides({"buffer.explorer_input.taskset.generator_args": {"seed": 1}})


@pytest.mark.parametrize("style", ["tens-ones", "columns", "columns-compare", "columns-ones", "via-ten"])
def test_worked_solutions_are_right_step_by_step(style: str):
    import re

    args = ArithArgs(solution_style=style)
    for row in arith(args, "train")[:500] + arith(args, "test"):
        steps, boxed = row["solution"].rsplit("\\boxed{", 1)
        assert boxed == row["answer"] + "}", row
        for a, op, b, result in re.findall(r"(\d+) ([-+*]) (\d+) = (-?\d+)", steps):
            assert {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op] == int(result), row


def test_via_ten_steps_never_cross_a_ten_in_the_ones_and_products_go_smaller_factor_first():
    """The via-ten style's point: no one-digit step carries or borrows (`34 - 7` is `34 - 4 = 30, 30 - 3 = 27`),
    and a product is first written smaller factor first, so a held-out `5 * 3` leans on a trained `3 * 5`; the
    held-out problems stay those of the default style."""
    import re

    args = ArithArgs(solution_style="via-ten")
    rows = arith(args, "train")[:2000] + arith(args, "test")
    for row in rows:
        for a, op, b, result in re.findall(r"(\d+) ([-+]) (\d) = (\d+)", row["solution"]):
            assert int(a) // 10 == int(result) // 10 or int(result) % 10 == 0 or int(a) % 10 == 0, row
        if row["operation"] == "*":
            a, b = map(int, re.findall(r"\d+", row["question"]))
            assert row["solution"].startswith(f"{min(a, b)} * {max(a, b)} = {a * b}"), row
    assert [r["question"] for r in arith(args, "test")] == [r["question"] for r in arith(ArithArgs(), "test")]
    assert arith(ArithArgs(), "train")[0]["solution"] == "65 + 10 = 75, 75 + 7 = 82. \\boxed{82}"
    assert arith(args, "train")[0]["solution"] == "65 + 10 = 75, 75 + 5 = 80, 80 + 2 = 82. \\boxed{82}"


@pytest.mark.parametrize("style", ["columns-compare", "columns-ones"])
def test_columns_compare_writes_the_ones_comparison_that_decides_the_borrow(style: str):
    """columns-compare's point: a difference starts with its ones compared (`4 < 7` or `7 >= 4`), and the step after
    it borrows exactly when the comparison says so; sums and products are as in columns. columns-ones names the two
    digits first (`ones 4 and 7: 4 < 7, ...`), so the comparison reads digits already written."""
    import re

    args = ArithArgs(solution_style=style)
    named = r"ones (\d) and (\d): " if style == "columns-ones" else ""
    rows = arith(args, "train")[:2000] + arith(args, "test")
    plain = {r["question"]: r["solution"] for r in arith(ArithArgs(solution_style="columns"), "train")[:2000]}
    subtractions = 0
    for row in rows:
        a, b = map(int, re.findall(r"\d+", row["question"]))
        if row["operation"] != "-":
            assert row["question"] not in plain or row["solution"] == plain[row["question"]], row
            continue
        subtractions += 1
        *names, x, sign, y, first = re.match(named + r"(\d) (<|>=) (\d), so (\d+) - ", row["solution"]).groups()
        assert names in ([], [x, y]), row  # columns-ones: the digits compared are the digits named
        assert (int(x), int(y)) == (a % 10, b % 10) and (sign == "<") == (a % 10 < b % 10), row
        assert int(first) == a % 10 + (10 if sign == "<" else 0), row  # 14 - 7 after 4 < 7
    assert subtractions > 500


def test_products_smaller_first_writes_the_twin_fact_and_changes_only_products():
    """products_smaller_first: `8 * 4` is worked as `4 * 8 = 32, so 8 * 4 = 32`, so the fact of a held-out product
    appears in the rows of its trained twin; sums and differences, and the questions, are as without it."""
    import re

    plain = arith(ArithArgs(solution_style="columns-compare"), "train")
    twin = arith(ArithArgs(solution_style="columns-compare", products_smaller_first=True), "train")
    assert [r["question"] for r in plain] == [r["question"] for r in twin]
    swapped = 0
    for before, after in zip(plain, twin, strict=True):
        if after["operation"] != "*":
            assert after == before
            continue
        a, b = map(int, re.findall(r"\d+", after["question"]))
        assert after["solution"].startswith(f"{min(a, b)} * {max(a, b)} = {a * b}"), after
        assert after["solution"].endswith(f"\\boxed{{{a * b}}}") and after["rejected"] != after["solution"]
        swapped += a > b
    assert swapped > 500
    operands = {tuple(map(int, re.findall(r"\d+", r["question"]))) for r in arith(ArithArgs(), "test")
                if r["operation"] == "*"}
    facts = " ".join(r["solution"] for r in twin)
    with_twin = [(a, b) for a, b in operands if a != b and (b, a) not in operands]  # held out, its twin trained
    assert len(with_twin) > 5
    assert all(f"{min(a, b)} * {max(a, b)} = {a * b}" in facts for a, b in with_twin)


def test_rejected_answers_are_the_solution_with_a_wrong_last_result():
    """The preference pairs of arith-dpo: the chosen side is the worked solution, the rejected side the same text up to
    its last result, which is a near miss (never negative), the same for the same problem."""
    rows = arith(ArithArgs(), "train")[:500] + arith(ArithArgs(), "test")
    for row in rows:
        right, wrong = row["solution"], row["rejected"]
        wrong_result = int(wrong.rsplit("\\boxed{", 1)[1].rstrip("}"))
        assert wrong_result != int(row["answer"]) and 0 <= wrong_result and abs(wrong_result - int(row["answer"])) <= 10
        assert wrong.rsplit("= ", 1)[0] == right.rsplit("= ", 1)[0], row  # the same steps before the last result
    again = {r["question"]: r["rejected"] for r in arith(ArithArgs(seed=1), "train")}
    assert all(again.get(r["question"], r["rejected"]) == r["rejected"] for r in rows)


def test_the_dpo_recipe_pairs_the_solution_against_the_models_own_wrong_answer():
    warm_up, dpo = load_recipe("arith-dpo").resolve_stages()
    fmt = dpo.buffer.trainer_input.experience_buffer.format
    assert (dpo.mode, dpo.algorithm.algorithm_type, fmt.chosen_key, fmt.rejected_key) == ("train", "dpo", "solution", "rejected")
    assert warm_up.algorithm.algorithm_type == "sft" and warm_up.buffer.total_steps == 50 and not dpo.warnings


def test_the_bundled_self_pairs_are_wrong_answers_to_problems_the_warm_up_did_not_train_on():
    """data/arith-self-pairs (scripts/arith_self_pairs.py): the chosen side is the generator's worked answer; the
    rejected side is the warm-up model's own answer and is wrong; the train pairs are rows after the warm-up's
    (pairs whose chosen side it just learned word for word carry no new preference), the held-out pairs
    held-out problems."""
    warm_up, dpo = load_recipe("arith-dpo").resolve_stages()
    seen = warm_up.buffer.total_steps * warm_up.buffer.train_batch_size  # the warm-up's rows, in order
    train = arith(ArithArgs(), "train")
    after = {r["question"] for r in train[seen:]}
    pairs = [t.raw for t in load_taskset(dpo.buffer.trainer_input.experience_buffer)]
    held_out = [t.raw for t in load_taskset(dpo.buffer.trainer_input.eval_pairs)]
    assert len(pairs) >= dpo.buffer.total_steps * dpo.buffer.batch_size and len(held_out) >= 200
    assert {p["question"] for p in pairs} <= after and {p["question"] for p in held_out} <= questions(arith(ArithArgs(), "test"))
    for row in pairs + held_out:
        assert score_math(row["solution"], row["answer"], require_boxed=True)["strict"] == 1.0, row
        assert score_math(row["rejected"], row["answer"], require_boxed=True)["strict"] == 0.0, row


def test_the_warm_up_trains_on_the_train_split_of_the_same_arguments():
    sft, _ = load_recipe("arith").resolve_stages()
    rows = sft.buffer.trainer_input.experience_buffer
    # the same problems as the evaluation's arguments; only the worked answers' style differs (digit by digit, a
    # difference's ones digits named and compared first, a product smaller factor first)
    style = {"solution_style": "columns-ones", "products_smaller_first": True}
    assert rows.generator_args == ArithArgs(**style).model_dump(mode="json")
    assert sft.buffer.explorer_input.eval_tasksets[0].generator_args == ArithArgs().model_dump(mode="json")
    assert not sft.warnings
    held_out = questions(arith(ArithArgs(), "test"))
    assert not {t.raw["question"] for t in load_taskset(rows)} & held_out
    seed1 = load_recipe("arith").with_overrides({"stages.0.buffer.trainer_input.experience_buffer.generator_args.seed": 1})
    assert load_taskset(seed1.resolve_stages()[0].buffer.trainer_input.experience_buffer)[0].raw == arith(
        ArithArgs(seed=1, **style), "train")[0]  # the rows follow generator_args
    assert any("may be trained on" in w for w in seed1.resolve_stages()[0].warnings)


def test_a_train_only_second_operand_drills_the_last_step_and_keeps_the_held_out_set():
    """`train_second_operand` narrows the train split (e.g. to the one-digit last step of the worked answers); the
    test split, and so what an eval taskset with the default arguments holds out, is unchanged."""
    drill = ArithArgs(operations=["-", "+"], train_second_operand=(0, 9), train_size=2000)
    rows = arith(drill, "train")
    assert {int(r["question"].removesuffix("?").split()[-1]) for r in rows} == set(range(10))
    assert {r["operation"] for r in rows} == {"-", "+"}
    assert not questions(rows) & questions(arith(ArithArgs(), "test"))
    assert arith(ArithArgs(train_second_operand=(0, 9)), "test") == arith(ArithArgs(), "test")
    config = load_recipe("arith").with_overrides(
        {"buffer.explorer_input.taskset.generator_args": {"train_second_operand": [0, 9], "train_size": 2000}})
    assert not any("may be trained on" in w for w in config.warnings)  # train-only arguments hold out the same problems
    with pytest.raises(ValidationError, match="outside every operation's operand range"):
        load_recipe("arith").with_overrides({"buffer.explorer_input.taskset.generator_args.train_second_operand": [200, 300]})


def test_train_operations_leave_an_operation_out_of_the_train_split_only():
    """`train_operations` draws the train split from some of the operations (RL on + and - without the products the
    train split repeats until learnt by heart); the held-out problems are those of all the operations, so an eval
    taskset with the recipe's arguments still holds out exactly what training never sees."""
    narrowed = ArithArgs(train_operations=["+", "-"], train_size=2000)
    rows = arith(narrowed, "train")
    assert {r["operation"] for r in rows} == {"+", "-"}
    assert arith(narrowed, "test") == arith(ArithArgs(), "test")
    assert not questions(rows) & questions(arith(ArithArgs(), "test"))
    config = load_recipe("arith").with_overrides(
        {"buffer.explorer_input.taskset.generator_args": {"train_operations": ["+", "-"], "train_size": 2000}})
    assert not any("may be trained on" in w for w in config.warnings)
    with pytest.raises(ValidationError, match=r"generator_args.*train_operations \['\*'\] are not among the operations"):
        load_recipe("arith").with_overrides({"buffer.explorer_input.taskset.generator_args": {
            "operations": ["+", "-"], "train_operations": ["*"]}})
