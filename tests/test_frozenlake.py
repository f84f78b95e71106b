"""FrozenLake (workflows/frozenlake.py on gymnasium) and its generated maps (generator:frozenlake): the action format,
the environment's steps, success, the state recorded before each turn, the generator's maps per seed — without an
engine (a scripted player through the real SmolLM2 tokenizer) — and, slow, the recipe end to end on the tiny model."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from backends.rollout import Sample, SamplingSettings, TokenIds
from buffer.taskset import Task, load_taskset
from generators import generate
from generators.games import frozenlake_demonstration, shortest_moves, shortest_path
from schemas import TasksetConfig
from tests.env_recipe import run_env_recipe
from tests.stand_in_engine import StandInEngine
from workflows import get_workflow
from workflows.frozenlake import FrozenLakeEnv, parse_action, task_map
from workflows.multi_turn import episode_stats
from workflows.render import renderer_for
from workflows.runner import WorkflowRunner

RENDERER = renderer_for("HuggingFaceTB/SmolLM2-135M-Instruct")
EOS = 2
MAP = ["SFFF", "FHFH", "FFFH", "HFFG"]  # gymnasium's 4x4 map: the goal is 6 moves away
PATH = ["Down", "Down", "Right", "Right", "Down", "Right"]


class Player(StandInEngine):
    """Answers each prompt with answer(turn index, prompt text)."""

    def __init__(self, answer: Callable[[int, str], str]) -> None:
        super().__init__()
        self.answer = answer

    def generate(self, prompts: list[TokenIds], sampling: SamplingSettings) -> list[list[Sample]]:
        out = []
        for prompt in prompts:
            text = RENDERER.decode_raw(prompt)
            ids = [*RENDERER.encode(self.answer(text.count("<|im_start|>assistant") - 1, text)), EOS][: sampling.max_tokens]
            out.append([Sample(list(prompt), ids, [-0.5] * len(ids), "stop")])
        return out


def scripted(moves: list[str]) -> Player:
    return Player(lambda turn, _: moves[min(turn, len(moves) - 1)])


def run(player: StandInEngine, rows: list[str] = MAP, repeat: int = 2, **args: object) -> list:
    task = Task(task_id="frozenlake/test/0", raw={"map": "\n".join(rows)}, workflow_args={"max_turns": 8, **args},
                workflow_type="frozenlake")
    return get_workflow("frozenlake")(task, player, RENDERER, repeat_times=repeat, explore_step=1, model_version=0,
                                      max_tokens=512).run()


# -- the action format ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "action"), [
    ("```Up```", "up"), ("I should go down. ```Down```", "down"), ("```left```", "left"), ("``` RIGHT ```", "right"),
    ("```3```", "right"), ("```1```", "left"),  # Trinity's numbers
    ("```Up``` no wait ```Left```", "left"),  # the last block counts
    ("Down", "down"), ("left.", "left"),  # the word alone
    ("go left", None), ("```Jump```", None), ("```Up``` and Down ```x```", None), ("", None), ("```5```", None),
])
def test_the_move_is_the_last_fenced_word_or_the_word_alone(text: str, action: str | None) -> None:
    assert parse_action(text) == action


# -- the environment ----------------------------------------------------------------------------------------------


def test_the_shortest_path_reaches_the_goal_with_reward_one() -> None:
    env = FrozenLakeEnv(MAP, is_slippery=False, max_turns=6, seed=0)
    assert env.state() == "P _ _ _\n_ O _ O\n_ _ _ O\nO _ _ G"
    steps = [env.step(f"```{move}```") for move in PATH]
    assert [s.done for s in steps] == [False] * 5 + [True] and [s.reward for s in steps] == [0.0] * 5 + [1.0]
    assert steps[-1].metrics == {"success": 1.0, "env_steps": 6.0, "invalid_actions": 0.0}
    assert env.final_reward() == (0.0, {"accuracy": 1.0})
    assert env.info()["positions"] == [[0, 0], [1, 0], [2, 0], [2, 1], [2, 2], [3, 2]]
    assert env.info()["step_actions"] == [m.lower() for m in PATH]
    assert "The map:\n_ _ _ _\nP O _ O\n" in steps[0].messages[0]["content"]  # one down


def test_a_hole_ends_the_episode_without_success() -> None:
    env = FrozenLakeEnv(MAP, is_slippery=False, max_turns=6, seed=0)
    env.step("Right")
    step = env.step("Down")  # (1, 1) is a hole
    assert step.done and step.reward == 0.0 and step.metrics["success"] == 0.0 and step.metrics["env_steps"] == 2.0
    assert env.final_reward() == (0.0, {"accuracy": 0.0})


def test_an_invalid_action_does_not_move_and_an_edge_is_said() -> None:
    env = FrozenLakeEnv(MAP, is_slippery=False, max_turns=6, seed=0, invalid_reward=-0.1)
    step = env.step("I think up")
    assert not step.done and step.reward == -0.1 and "not a move" in step.messages[0]["content"]
    assert step.metrics == {"success": 0.0, "env_steps": 0.0, "invalid_actions": 1.0}
    step = env.step("```Up```")  # into the edge: a move that stays
    assert "hit the edge" in step.messages[0]["content"] and env.position == (0, 0) and step.metrics["env_steps"] == 1.0


def test_slippery_ice_follows_the_episode_seed() -> None:
    def walk(seed: int) -> list[list[int]]:
        env = FrozenLakeEnv(["SFFFFFFF"] * 7 + ["FFFFFFFG"], is_slippery=True, max_turns=8, seed=seed)
        for _ in range(6):
            if env.step("Right").done:
                break
        return env.info()["positions"]

    assert walk(1) == walk(1)
    assert len({json.dumps(walk(s)) for s in range(6)}) > 1  # the ice slips differently per seed


def test_a_trinity_row_draws_its_map_from_seed_size_and_p() -> None:
    rows = task_map({"seed": 7, "size": 5, "p": 0.8}, max_moves=6)
    assert rows == task_map({"seed": 7, "size": 5, "p": 0.8}, max_moves=6) and len(rows) == 5
    assert (path := shortest_path(rows)) is not None and path <= 6
    with pytest.raises(KeyError, match="map"):
        task_map({"question": "?"}, max_moves=6)


# -- the workflow: one experience per episode, the state of every step ---------------------------------------------


def test_each_episode_records_the_state_and_action_of_every_turn() -> None:
    (exp, _) = run(scripted(["```Down```", "oops", "```Down```", "```Right```", "```Right```", "```Down```",
                             "```Right```"]))
    assert exp.reward == 1.0 and exp.info["success"] is True and exp.info["stop"] == "done"
    assert exp.info["turns"] == 7 and exp.info["env_steps"] == 6.0 and exp.info["invalid_actions"] == 1.0
    states = exp.info["step_states"]
    assert len(states) == 7 and states[0].startswith("P _ _ _") and states[1] == states[2]  # the invalid turn stays
    assert exp.info["step_actions"][1] is None and exp.info["positions"][1] == exp.info["positions"][2] == [1, 0]
    # each turn's tokens lie in its span, trained; what lies between is the env's (mask 0)
    spans = exp.info["turn_spans"]
    assert len(spans) == 7 and all(set(exp.response_mask[a:b]) == {1} for a, b in spans)
    assert all(set(exp.response_mask[b:a]) == {0} for (_, b), (a, _) in zip(spans, spans[1:], strict=False))
    assert RENDERER.decode(exp.response_token_ids[spans[0][0]:spans[0][1]]).strip() == "```Down```"
    json.dumps(exp.info)  # the experience store keeps info as JSON


def test_episode_stats_report_success_and_steps_per_episode() -> None:
    lost = run(scripted(["```Right```", "```Down```"]))  # into the hole after 2 moves
    won = run(scripted([f"```{m}```" for m in PATH]))
    stats = episode_stats(lost + won)
    assert stats["success_rate"] == 0.5 and stats["steps_per_episode"] == (2 * 2 + 6 * 2) / 4
    assert stats["turns_mean"] == (2 * 2 + 6 * 2) / 4


def test_the_generated_taskset_runs_through_the_runner() -> None:
    tasks = load_taskset(TasksetConfig(name="fl", path="generator:frozenlake", split="test[:3]",
                                       format={"prompt_key": "map"}, default_workflow_type="frozenlake", workflow_args={"max_turns": 3}))
    assert len(tasks) == 3 and "map" in tasks[0].raw
    result = WorkflowRunner([scripted(["```Down```"])], RENDERER, runner_per_model=2).run(tasks, explore_step=1,
                                                                                           repeat_times=2)
    assert not result.failures and len(result.experiences) == 6
    assert all(1 <= len(e.info["step_states"]) == e.info["turns"] <= 3 for e in result.experiences)


# -- the generator ----------------------------------------------------------------------------------------------


def test_the_generator_is_the_same_per_seed_and_holds_out_its_test_maps() -> None:
    args = {"seed": 3, "train_size": 200, "test_size": 20, "min_path": 2, "max_path": 5}
    train, test = generate("frozenlake", args, "train"), generate("frozenlake", args, "test")
    assert train == generate("frozenlake", dict(args), "train") and len(train) == 200 and len(test) == 20
    assert generate("frozenlake", {**args, "seed": 4}, "test") != test
    assert not {r["map"] for r in train} & {r["map"] for r in test} and len({r["map"] for r in train}) == 200
    for row in train + test:
        rows = row["map"].split("\n")
        assert len(rows) == 4 and all(len(r) == 4 for r in rows)
        assert 2 <= shortest_path(rows) == row["shortest_path"] <= 5 and row["is_slippery"] is False
    big = generate("frozenlake", {"size": 6, "min_path": 6, "max_path": 10, "test_size": 5, "train_size": 5}, "test")
    assert all(len(r["map"].split("\n")) == 6 and r["shortest_path"] >= 6 for r in big)


@pytest.mark.parametrize("goal_hint", [False, True])
def test_a_demonstration_is_the_episode_the_workflow_shows_for_its_moves(goal_hint: bool) -> None:
    """The SFT rows of frozenlake-learn's warm-up: each move of a shortest walk, after exactly the chat the workflow
    renders for the model at that turn (with or without the positions in words), and the walk reaches the goal."""
    chats = frozenlake_demonstration(MAP, 6, goal_hint)
    assert [c[-1]["content"] for c in chats] == [f"```{m.capitalize()}```" for m in shortest_moves(MAP)]
    assert len(chats) == len(PATH) == shortest_path(MAP)  # one of the map's shortest walks
    seen: list[str] = []

    def answer(turn: int, text: str) -> str:
        seen.append(text)
        return chats[turn][-1]["content"]

    (episode,) = run(Player(answer), repeat=1, max_turns=6, goal_hint=goal_hint)
    assert episode.info["success"] and episode.reward == 1.0
    assert seen == [RENDERER.text(chat[:-1], add_generation_prompt=True) for chat in chats]
    where = ["3 steps down and 3 steps right", "2 steps down and 3 steps right", "1 step down and 3 steps right",
             "1 step down and 2 steps right", "2 steps right", "1 step right"]  # the goal from each cell of the walk
    assert [f"The goal is {w}.\n" in text for w, text in zip(where, seen, strict=True)] == [goal_hint] * len(seen)


def test_the_demonstrations_are_the_train_maps_shortest_walks() -> None:
    args = {"seed": 3, "train_size": 50, "test_size": 10, "min_path": 2, "max_path": 5}
    maps = generate("frozenlake", args, "train")
    rows = generate("frozenlake", {**args, "demonstrations": 5}, "train")
    assert len(rows) == sum(r["shortest_path"] for r in maps)  # one row a move
    assert {r["map"] for r in rows} == {r["map"] for r in maps}
    for row in rows:
        chat = row["messages"]
        assert chat[-1]["role"] == "assistant" and sum(m["role"] == "assistant" for m in chat) == row["turn"] + 1
        assert "You have 5 moves." in chat[0]["content"]
    assert generate("frozenlake", {**args, "demonstrations": 5}, "test")[0]["map"] in {
        r["map"] for r in generate("frozenlake", args, "test")}
    shown = generate("frozenlake", {**args, "demonstrations": 5, "goal_hint": True}, "train")
    assert [r["map"] for r in shown] == [r["map"] for r in rows]  # the same walks, told where the goal lies
    assert all("The goal is " in r["messages"][1]["content"] for r in shown)


def test_bad_generator_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="min_path"):
        generate("frozenlake", {"min_path": 5, "max_path": 3}, "test")
    with pytest.raises(ValueError, match="distinct puzzles"):
        generate("frozenlake", {"size": 2, "train_size": 500}, "train")


def learning_script() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("frozenlake_learning", Path(__file__).parents[1] / "scripts" /
                                                  "frozenlake_learning.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_the_learning_script_pairs_each_held_out_map_before_and_after() -> None:
    """scripts/frozenlake_learning.py: RL's gain is the mean of per-map differences, its standard error theirs."""
    import math

    script = learning_script()
    found = script.paired({0: {"a": 0.0, "b": 0.0, "c": 1.0, "d": 0.0}, 20: {"a": 1.0, "b": 1.0, "c": 0.0, "d": 0.0}})
    # differences 1, 1, -1, 0: mean 0.25, sample variance 2.75 / 3
    assert found["gain"] == 0.25 and math.isclose(found["gain_se"], math.sqrt(2.75 / 3 / 4))
    assert (found["maps_solved_newly"], found["maps_lost"], found["rl_signal"]) == (2, 1, False)
    assert [(p["rl_step"], p["successes"]) for p in found["curve"]] == [(0, 1), (20, 2)]


def test_the_scripted_walkers_success_is_exact() -> None:
    """The walkers the model is compared with: on S H / F G, a random walk reaches G only by Down then Right within
    two turns (1/16); the walk toward the goal picks Down or Right first (Right is the hole): 1/2."""
    script = learning_script()
    assert script.walk_success(["SH", "FG"], 2, script.random_walk) == 1 / 16
    assert script.walk_success(["SH", "FG"], 2, script.toward_goal) == 1 / 2
    assert script.walk_success(["SH", "FG"], 1, script.toward_goal) == 0.0
    assert script.walk_success(["SG", "FF"], 1, script.random_walk) == 1 / 4


# -- the recipe, end to end (slow) -------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_recipe_runs_and_stores_each_episode_with_its_steps(tmp_path: Path, tiny_model_path: str) -> None:
    """`frozenlake` on the tiny model, 1 step: every episode lands in the experience store as one experience with
    its success, steps and the state of each turn; explore and eval report the success rate and steps per episode."""
    for exp in run_env_recipe("frozenlake", tmp_path, tiny_model_path, max_turns=6,
                              metrics=("explore/turns_mean", "eval/frozenlake-eval/steps_per_episode")):
        assert exp["reward"] == (1.0 if exp["info"]["success"] else 0.0)
        assert exp["info"]["step_states"][0].count("P") == 1
