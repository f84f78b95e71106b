"""Sudoku (workflows/sudoku.py) and its generated puzzles (generator:sudoku): the move format, the rules each move is
checked against, the rewards (Trinity's: +1 solved, -1 an invalid turn that ends the episode), the board recorded
before each turn and the generator's puzzles per seed — without an engine (a scripted player through the real
SmolLM2 tokenizer) — and, slow, the recipe end to end on the tiny model."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from buffer.taskset import Task, load_taskset
from generators import generate
from generators.games import conflict, is_solved, is_valid, parse_board, sudoku_puzzle, sudoku_solution
from schemas import TasksetConfig
from tests.env_recipe import run_env_recipe
from tests.test_frozenlake import RENDERER, Player
from workflows import get_workflow
from workflows.multi_turn import episode_stats
from workflows.runner import WorkflowRunner
from workflows.sudoku import SudokuEnv, parse_moves, render_board

PUZZLE = "2341\n0032\n3004\n4213"  # blanks: (2,1)=1 (2,2)=4 (3,2)=1 (3,3)=2, 1-based


def env(**kwargs: object) -> SudokuEnv:
    return SudokuEnv(parse_board(PUZZLE), max_turns=4, **kwargs)  # type: ignore[arg-type]


def run(moves: list[str], repeat: int = 1, **args: object) -> list:
    task = Task(task_id="sudoku/test/0", raw={"puzzle": PUZZLE}, workflow_args={"max_turns": 4, **args},
                workflow_type="sudoku")
    player = Player(lambda turn, _: moves[min(turn, len(moves) - 1)])
    return get_workflow("sudoku")(task, player, RENDERER, repeat_times=repeat, explore_step=1, model_version=0,
                                  max_tokens=512).run()


# -- the move format and the rules -----------------------------------------------------------------------------


def test_moves_are_lines_of_three_numbers() -> None:
    assert parse_moves("2 1 1\n2 2 4") == [(2, 1, 1), (2, 2, 4)]
    assert parse_moves("I fill row 2 first:\n2, 1, 1\n- 2 2 4.\nRow 3: 3 _ _ 4") == [(2, 1, 1), (2, 2, 4)]
    assert parse_moves("2 1\n2 1 1 1\nrow 2 col 1 is 1") == []


def test_the_rules_find_each_conflict() -> None:
    board = parse_board(PUZZLE)
    assert render_board(board).splitlines()[1] == "Row 2: _ _ 3 2"
    assert conflict(board, 1, 0, 1) is None
    assert conflict(board, 1, 0, 3) == "row 2 already has a 3"
    assert conflict(board, 1, 0, 4) == "column 1 already has a 4"
    assert conflict(parse_board("1000\n0000\n0000\n0000"), 1, 1, 1) == "the box of row 2, column 2 already has a 1"
    assert parse_board([[2, 3, 4, 1], [0, 0, 3, 2], [3, 0, 0, 4], [4, 2, 1, 3]]) == board  # Trinity's lists
    assert parse_board("23 41\n..32\n3..4\n4213") == board
    with pytest.raises(ValueError):
        parse_board("123\n456")


def test_solving_in_two_turns_earns_one() -> None:
    e = env()
    assert e.state() == render_board(parse_board(PUZZLE))
    first = e.step("2 1 1\n2 2 4")
    assert not first.done and first.reward == 0.0 and "Accepted" in first.messages[0]["content"]
    assert first.metrics == {"success": 0.0, "env_steps": 1.0, "cells_filled": 2.0, "invalid_turns": 0.0}
    second = e.step("3 2 1\n3 3 2")
    assert second.done and second.reward == 1.0 and second.metrics["success"] == 1.0
    assert e.final_reward() == (0.0, {"accuracy": 1.0})
    assert e.info()["step_moves"] == [[[2, 1, 1], [2, 2, 4]], [[3, 2, 1], [3, 3, 2]]]


@pytest.mark.parametrize(("answer", "why"), [
    ("I don't know", "no move found"),
    ("2 1 1\n2 2 4\n3 2 1\n3 3 2\n1 1 2\n1 2 3", "6 moves, at most 5"),
    ("1 1 2", "already filled"),
    ("2 1 3", "row 2 already has a 3"),
    ("5 1 1", "from 1 to 4"),
])
def test_an_invalid_turn_costs_one_and_ends_the_episode_or_is_undone(answer: str, why: str) -> None:
    e = env()
    assert why in (e.check(parse_moves(answer)) or "")
    step = e.step(answer)
    assert step.done and step.reward == -1.0 and step.metrics["invalid_turns"] == 1.0 and not step.messages
    lenient = env(end_on_invalid=False, invalid_reward=-0.2)
    step = lenient.step(answer)
    assert not step.done and step.reward == -0.2 and why in step.messages[0]["content"]
    assert lenient.board == parse_board(PUZZLE)  # an invalid turn changes nothing


def test_moves_of_one_turn_are_checked_in_order() -> None:
    assert env().check([(2, 1, 1), (2, 2, 1)]) == "2 2 1: row 2 already has a 1"


def test_cell_reward_shapes_each_filled_cell() -> None:
    e = env(cell_reward=0.1)
    assert e.step("2 1 1").reward == pytest.approx(0.1)
    assert e.step("2 2 4\n3 2 1\n3 3 2").reward == pytest.approx(1.3)


# -- the workflow --------------------------------------------------------------------------------------------------


def test_each_episode_records_the_board_of_every_turn() -> None:
    (exp,) = run(["2 1 1\n2 2 4", "3 2 1\n3 3 2"])
    assert exp.reward == 1.0 and exp.info["success"] is True and exp.info["turns"] == 2 and exp.info["env_steps"] == 2.0
    first, second = exp.info["step_states"]
    assert first == render_board(parse_board(PUZZLE)) and "Row 2: 1 4 3 2" in second
    assert len(exp.info["turn_spans"]) == 2 and all(set(exp.response_mask[a:b]) == {1} for a, b in exp.info["turn_spans"])
    json.dumps(exp.info)
    (lost,) = run(["1 1 2"])
    assert lost.reward == -1.0 and lost.info["success"] is False and lost.info["turns"] == 1 and lost.info["env_steps"] == 0.0
    assert episode_stats([exp, lost]) | {"episodes_failed": 0.0} == {
        "turns_mean": 1.5, "success_rate": 0.5, "steps_per_episode": 1.0, "episodes_failed": 0.0}


def test_the_generated_taskset_runs_through_the_runner() -> None:
    tasks = load_taskset(TasksetConfig(name="sd", path="generator:sudoku", split="test[:2]", format={"prompt_key": "puzzle"},
                                       default_workflow_type="sudoku", workflow_args={"max_turns": 2}))
    player = Player(lambda turn, text: "1 1 1")
    result = WorkflowRunner([player], RENDERER, runner_per_model=2).run(tasks, explore_step=1, repeat_times=2)
    assert not result.failures and len(result.experiences) == 4
    assert all(len(e.info["step_states"]) == e.info["turns"] >= 1 for e in result.experiences)


# -- the generator ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [4, 9])
def test_a_generated_solution_keeps_the_rules(size: int) -> None:
    rng = random.Random(0)
    for _ in range(20):
        solution = sudoku_solution(rng, size)
        assert is_solved(solution)
        puzzle = sudoku_puzzle(rng, solution, 5)
        assert sum(v == 0 for row in puzzle for v in row) == 5 and is_valid(puzzle) and not is_solved(puzzle)


def test_the_generator_is_the_same_per_seed_and_holds_out_its_test_puzzles() -> None:
    args = {"seed": 2, "size": 9, "blanks": 30, "train_size": 50, "test_size": 10}
    train, test = generate("sudoku", args, "train"), generate("sudoku", args, "test")
    assert train == generate("sudoku", dict(args), "train") and (len(train), len(test)) == (50, 10)
    assert generate("sudoku", {**args, "seed": 3}, "test") != test
    assert not {r["puzzle"] for r in train} & {r["puzzle"] for r in test}
    for row in train + test:
        puzzle, solution = parse_board(row["puzzle"]), parse_board(row["solution"])
        assert len(puzzle) == 9 and sum(v == 0 for r in puzzle for v in r) == 30 and is_solved(solution)
        assert all(p in (0, s) for pr, sr in zip(puzzle, solution, strict=True) for p, s in zip(pr, sr, strict=True))
    with pytest.raises(ValueError, match="blanks"):
        generate("sudoku", {"size": 4, "blanks": 17}, "test")


# -- the recipe, end to end (slow) -------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_recipe_runs_and_stores_each_episode_with_its_steps(tmp_path: Path, tiny_model_path: str) -> None:
    """`sudoku` on the tiny model, 1 step: every episode lands in the experience store as one experience with its
    success, steps and the board of each turn; explore and eval report the success rate and steps per episode."""
    for exp in run_env_recipe("sudoku", tmp_path, tiny_model_path, max_turns=4,
                              metrics=("explore/turns_mean", "eval/sudoku-eval/steps_per_episode")):
        assert exp["info"]["step_states"][0].startswith("Row 1: ")
        assert len(exp["info"]["step_moves"]) <= exp["info"]["turns"]
