"""ScienceWorld (workflows/sciworld.py on the `scienceworld` package, Java) and its taskset (generator:sciworld): the
command format, the environment's steps, the score as reward, success, the state recorded before each turn, the
taskset's split by variation — with a scripted player through the real SmolLM2 tokenizer — and, slow, the recipe end to
end on the tiny model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from buffer.taskset import Task
from generators import generate
from tests.env_recipe import run_env_recipe
from tests.test_frozenlake import RENDERER, Player, scripted
from workflows import get_workflow
from workflows.multi_turn import episode_stats
from workflows.sciworld import SciWorldEnv, task_spec
from workflows.text_games import parse_command

pytest.importorskip("scienceworld")
pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="ScienceWorld needs a Java runtime")

TASK, VARIATION = "find-living-thing", 240


@pytest.mark.parametrize(("text", "command"), [
    ("<action>look around</action>", "look around"), ("I think. <action> open  door </action>", "open door"),
    ("<action>a</action> then <action>focus on egg</action>", "focus on egg"),  # the last tag counts
    ("```teleport to kitchen```", "teleport to kitchen"), ("Action: look around.", "look around"),
    ("go east\nbecause the door is there", "go east"), ("", None), ("   \n ", None), ("<action> </action>", None),
    ("<action>take\x12 key\x00</action>", "take key"), ("<action>\x10\x11</action>", None),  # no control characters
    ("<action>" + "é" * 150 + "</action>", "é" * 95),  # cut to 190 bytes, never inside a character
])
def test_the_command_is_the_last_action_tag_or_fence_or_the_first_line(text: str, command: str | None) -> None:
    assert parse_command(text) == command


def test_a_row_names_its_task_or_trinity_s_task_desc_does() -> None:
    assert task_spec({"task_name": "boil", "variation": 3, "simplification": "easy"}) == ("boil", 3, "easy")
    assert task_spec({"task_desc": json.dumps({"task_name": "melt", "var_num": 5})}) == ("melt", 5, None)
    with pytest.raises(KeyError, match="task_name"):
        task_spec({"question": "?"})


def test_reset_step_score_and_failure() -> None:
    env = SciWorldEnv(TASK, VARIATION, "easy", max_turns=5)
    try:
        first = env.initial_messages()
        assert "find a(n) living thing" in first[1]["content"] and "This room is called" in env.state()
        step = env.step("<action>look around</action>")
        assert not step.done and 0.0 <= step.reward <= 1.0 and step.metrics["env_steps"] == 1.0
        assert "This room is called" in step.messages[0]["content"]
        step = env.step("no command here at all")  # one line: sent as it is, ScienceWorld does not know it
        assert step.metrics["invalid_actions"] == 1.0 and "No known action" in step.messages[0]["content"]
        step = env.step("")  # nothing: not sent
        assert step.metrics["env_steps"] == 2.0 and step.metrics["invalid_actions"] == 2.0
        step = env.step("<action>focus on air</action>")  # the wrong object: the task fails, score 0
        assert step.done and step.metrics["success"] == 0.0 and env.score == 0.0
        info = env.info()
        assert info["step_actions"] == ["look around", "no command here at all", None, "focus on air"]
        assert info["success"] is False and info["env_steps"] == 3.0
    finally:
        env.release()


def test_completing_the_task_is_success_with_reward_one() -> None:
    from scienceworld import ScienceWorldEnv

    sim = ScienceWorldEnv("")
    try:
        sim.load("find-living-thing", VARIATION, "easy", generateGoldPath=True)
        gold = sim.get_gold_action_sequence()
    finally:
        sim.close()
    env = SciWorldEnv(TASK, VARIATION, "easy", max_turns=len(gold))
    try:
        env.initial_messages()
        rewards, step = [], None
        for action in gold:
            step = env.step(f"<action>{action}</action>")
            rewards.append(step.reward)
            if step.done:
                break
        assert step is not None and step.done and step.metrics["success"] == 1.0
        assert abs(sum(rewards) - 1.0) < 1e-9 and env.final_reward() == (0.0, {"accuracy": 1.0, "score": 1.0})
    finally:
        env.release()


def _run(player: Player, repeat: int = 2, **args: object) -> list:
    task = Task(task_id="sciworld/test/0", raw={"task_name": TASK, "variation": VARIATION, "simplification": "easy"},
                workflow_args={"max_turns": 3, **args}, workflow_type="sciworld")
    return get_workflow("sciworld")(task, player, RENDERER, repeat_times=repeat, explore_step=1, model_version=0,
                                    max_tokens=1024).run()


def test_each_episode_records_the_observation_each_turn_saw_and_its_steps() -> None:
    exps = _run(scripted(["<action>look around</action>", "<action>inventory</action>", "<action>look around</action>"]))
    assert len(exps) == 2
    for exp in exps:
        assert exp.info["turns"] == 3 and exp.info["stop"] == "max_turns" and exp.info["env_steps"] == 3.0
        assert exp.info["success"] is False and len(exp.info["step_states"]) == 3
        assert exp.info["step_states"][0].startswith("This room is called")
        assert exp.info["step_actions"] == ["look around", "inventory", "look around"]
        assert 0.0 <= exp.reward <= 1.0
        json.dumps(exp.info)
    stats = episode_stats(exps)
    assert stats["success_rate"] == 0.0 and stats["steps_per_episode"] == 3.0


def test_the_taskset_splits_by_scienceworld_s_own_variations() -> None:
    args = {"tasks": ["find-living-thing", "boil"], "train_per_task": 4, "test_per_task": 2}
    train, test = generate("sciworld", args, "train"), generate("sciworld", args, "test")
    assert len(train) == 8 and len(test) == 4 and train == generate("sciworld", dict(args), "train")
    assert {r["task_name"] for r in test} == {"find-living-thing", "boil"}
    assert not {(r["task_name"], r["variation"]) for r in train} & {(r["task_name"], r["variation"]) for r in test}
    with pytest.raises(ValueError, match="unknown ScienceWorld task"):
        generate("sciworld", {"tasks": ["fly-to-the-moon"]}, "test")


@pytest.mark.slow
def test_the_recipe_runs_and_stores_each_episode_with_its_steps(tmp_path: Path, tiny_model_path: str) -> None:
    """`sciworld` on the tiny model, 1 step: every episode lands in the experience store with its success, steps and
    the observation of each turn; explore reports the success rate and steps per episode."""
    for exp in run_env_recipe("sciworld", tmp_path, tiny_model_path, max_turns=4):
        assert 0.0 <= exp["reward"] <= 1.0 and exp["info"]["task_name"].startswith("find-")
