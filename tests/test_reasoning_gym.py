"""generator:reasoning_gym (reasoning-gym's procedural datasets as tasksets, difficulty their own config keys) and
reasoning_gym_reward (each dataset's own verifier): the rows per seed, the held-out split, the settings checked
against the dataset's config class, the verifier's scores through math_workflow, and, slow, the rg-countdown recipe
through the real flow on the tiny model."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from pydantic import ValidationError

from backends.rollout import Sample, SamplingSettings, TokenIds
from buffer.taskset import TasksetError, load_taskset
from deployments import load_recipe
from generators import generate
from schemas import TasksetConfig, error_items
from tests.stand_in_engine import StandInEngine
from workflows.reasoning_gym import SYSTEM_PROMPTS, extract_answer, score_reasoning_gym
from workflows.render import renderer_for
from workflows.runner import WorkflowRunner

EASY_COUNTDOWN = {"dataset": "countdown", "test_size": 10, "train_size": 40,
                  "config": {"min_numbers": 3, "max_numbers": 3, "max_value": 20, "min_target": 10, "max_target": 50}}
_TS = "buffer.explorer_input.taskset"


# -- the generator ----------------------------------------------------------------------------------------------


def test_the_rows_are_the_same_per_seed_and_differ_across_seeds() -> None:
    rows = generate("reasoning_gym", EASY_COUNTDOWN, "test")
    assert rows == generate("reasoning_gym", json.loads(json.dumps(EASY_COUNTDOWN)), "test") and len(rows) == 10
    assert generate("reasoning_gym", {**EASY_COUNTDOWN, "seed": 1}, "test") != rows
    for row in rows:
        meta = json.loads(row["metadata"])
        assert row["dataset"] == "countdown" and len(meta["numbers"]) == 3 and 10 <= meta["target"] <= 50
        assert json.loads(row["reasoning_gym"])["index"] == row["index"]


@pytest.mark.parametrize("dataset", ["countdown", "basic_arithmetic", "leg_counting"])
def test_train_and_test_share_no_question(dataset: str) -> None:
    args = {**EASY_COUNTDOWN, "dataset": dataset, "config": {} if dataset != "countdown" else EASY_COUNTDOWN["config"]}
    train, test = generate("reasoning_gym", args, "train"), generate("reasoning_gym", args, "test")
    assert len(train) == 40 and len(test) == 10 and len({r["question"] for r in test}) == 10
    assert not {r["question"] for r in train} & {r["question"] for r in test}
    assert not {r["index"] for r in train} & {r["index"] for r in test}


def test_difficulty_keys_change_the_data() -> None:
    hard = {**EASY_COUNTDOWN, "config": {"min_numbers": 5, "max_numbers": 5, "min_target": 200}}
    easy_rows, hard_rows = generate("reasoning_gym", EASY_COUNTDOWN, "test"), generate("reasoning_gym", hard, "test")
    assert all(len(json.loads(r["metadata"])["numbers"]) == 3 for r in easy_rows)
    assert all(len(json.loads(r["metadata"])["numbers"]) == 5 and json.loads(r["metadata"])["target"] >= 200
               for r in hard_rows)
    few = generate("reasoning_gym", {"dataset": "basic_arithmetic", "test_size": 5, "train_size": 5,
                                     "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}}, "test")
    many = generate("reasoning_gym", {"dataset": "basic_arithmetic", "test_size": 5, "train_size": 5,
                                      "config": {"min_terms": 5, "max_terms": 5, "min_digits": 3, "max_digits": 3}}, "test")
    assert [r["question"] for r in few] != [r["question"] for r in many]
    assert max(len(r["question"]) for r in few) < min(len(r["question"]) for r in many)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("generator_args.config", {"max_numberz": 4}, "countdown has no setting 'max_numberz'; its settings (CountdownConfig)"),
    ("generator_args.config", {"min_numbers": 5, "max_numbers": 3}, "max_numbers must be >= min_numbers"),
    ("generator_args.config", {"seed": 3}, "set generator_args.seed instead"),
    ("generator_args.dataset", "countdwn", "reasoning-gym has no dataset 'countdwn'"),
    ("generator_args.size", 5, "generator 'reasoning_gym' has no argument 'size'"),
    ("reward_fn_args.answer_format", "xml", "'xml' is not one of answer_tag, boxed"),
])
def test_a_wrong_setting_is_refused_naming_it(key: str, value: object, message: str) -> None:
    path = f"{_TS}.{key}"
    override = {path: value} if key != "generator_args.dataset" else {f"{_TS}.generator_args": {"dataset": value}}
    with pytest.raises(ValidationError) as info:
        load_recipe("rg-countdown").with_overrides(override)
    (where, msg), *_ = error_items(info.value)
    assert where.startswith(path) and message in msg, (where, msg)


def test_the_taskset_loads_like_a_file_and_a_bad_setting_fails_the_load() -> None:
    taskset = TasksetConfig(name="rg", path="generator:reasoning_gym", split="test[:4]", generator_args=EASY_COUNTDOWN,
                            format={"prompt_key": "question", "response_key": "answer"},
                            default_workflow_type="math_workflow", default_reward_fn_type="reasoning_gym_reward")
    tasks = load_taskset(taskset)
    assert [t.task_id for t in tasks] == [f"rg/test/{i}" for i in range(4)]
    assert [t.raw for t in tasks] == generate("reasoning_gym", EASY_COUNTDOWN, "test")[:4]
    with pytest.raises(TasksetError, match="max_numberz"):
        load_taskset(taskset.model_copy(update={"generator_args": {**EASY_COUNTDOWN, "config": {"max_numberz": 1}}}))


# -- the reward -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "right", "wrong"), [
    (EASY_COUNTDOWN, None, "1 + 1"),
    ({"dataset": "basic_arithmetic", "test_size": 3, "train_size": 3}, None, "123456789"),
    ({"dataset": "leg_counting", "test_size": 3, "train_size": 3}, None, "-1"),
])
def test_each_datasets_verifier_scores_a_right_and_a_wrong_answer(args: dict, right: str | None, wrong: str) -> None:
    for row in generate("reasoning_gym", args, "test"):
        gold = right or row["answer"]
        good = score_reasoning_gym(f"Thinking... <answer>{gold}</answer>", row["reasoning_gym"], row["question"])
        assert good == {"accuracy": 1.0, "format_bonus": 0.0, "strict": 1.0, "lenient": 1.0, "format": 1.0}
        bad = score_reasoning_gym(f"<answer>{wrong}</answer>", row["reasoning_gym"], row["question"])
        assert bad["strict"] == 0.0 and bad["accuracy"] < 1.0 and bad["format"] == 1.0
        none = score_reasoning_gym(f"it is {gold}", row["reasoning_gym"], row["question"])
        assert none["accuracy"] == 0.0 and none["format"] == 0.0
        boxed = score_reasoning_gym(f"so \\boxed{{{gold}}}", row["reasoning_gym"], row["question"], "boxed")
        assert boxed["strict"] == 1.0


def test_countdown_verifier_gives_its_partial_credit() -> None:
    row = generate("reasoning_gym", EASY_COUNTDOWN, "test")[0]
    assert score_reasoning_gym("<answer>1+2</answer>", row["reasoning_gym"])["accuracy"] == 0.05  # wrong numbers
    assert score_reasoning_gym("<answer>(((</answer>", row["reasoning_gym"])["accuracy"] == 0.01  # unparsable
    assert score_reasoning_gym("<answer>__import__('os')</answer>", row["reasoning_gym"])["accuracy"] == 0.0  # not asked
    # the verifier evaluates the expression: the gold one written without spaces counts as well
    assert score_reasoning_gym(f"<answer>{row['answer'].replace(' ', '')}</answer>", row["reasoning_gym"])["strict"] == 1.0


def test_a_row_made_by_another_version_is_an_error() -> None:
    row = generate("reasoning_gym", EASY_COUNTDOWN, "test")[0]
    with pytest.raises(ValueError, match="another version of reasoning-gym"):
        score_reasoning_gym("<answer>1</answer>", row["reasoning_gym"], "another question")


@pytest.mark.parametrize(("text", "fmt", "answer"), [
    ("<answer>1</answer> then <answer> 2 </answer>", "answer_tag", "2"),
    ("no tag", "answer_tag", None),
    ("\\boxed{3} and \\boxed{4 + {5}}", "boxed", "4 + {5}"),
])
def test_the_answer_is_the_last_tag_or_box(text: str, fmt: str, answer: str | None) -> None:
    assert extract_answer(text, fmt) == answer


RENDERER = renderer_for("HuggingFaceTB/SmolLM2-135M-Instruct")


class Answerer(StandInEngine):
    """Answers each prompt with answer(prompt text)."""

    def __init__(self, answer) -> None:  # noqa: ANN001
        super().__init__()
        self.answer = answer

    def generate(self, prompts: list[TokenIds], sampling: SamplingSettings) -> list[list[Sample]]:
        out = []
        for prompt in prompts:
            ids = [*RENDERER.encode(self.answer(RENDERER.decode_raw(prompt))), 2][: sampling.max_tokens]
            out.append([Sample(list(prompt), ids, [-0.5] * len(ids), "stop") for _ in range(sampling.n)])
        return out


def test_math_workflow_scores_with_the_verifier_under_reasoning_gyms_prompt() -> None:
    args = {"dataset": "leg_counting", "test_size": 4, "train_size": 4}
    gold = {r["question"]: r["answer"] for r in generate("reasoning_gym", args, "test")}
    tasks = load_taskset(TasksetConfig(
        name="legs", path="generator:reasoning_gym", split="test", generator_args=args,
        format={"prompt_key": "question", "response_key": "answer"},
        default_workflow_type="math_workflow", default_reward_fn_type="reasoning_gym_reward"))

    def answer(prompt: str) -> str:
        assert SYSTEM_PROMPTS["answer_tag"].strip() in prompt  # reasoning-gym's prompt, asking for <answer>
        question = next(q for q in gold if q.strip() in prompt)
        return f"<answer>{gold[question]}</answer>" if question == tasks[0].raw["question"] else "<answer>0</answer>"

    result = WorkflowRunner([Answerer(answer)], RENDERER, runner_per_model=2).run(tasks, explore_step=1, repeat_times=2)
    assert not result.failures and len(result.experiences) == 8
    rewards = {e.info["gold"]: e.reward for e in result.experiences}
    assert rewards[tasks[0].raw["answer"]] == 1.0 and sorted(e.reward for e in result.experiences)[:6] == [0.0] * 6


# -- the recipe, end to end (slow) -------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_recipe_runs_one_grpo_step_on_the_generated_countdown(tmp_path: Path, tiny_model_path: str) -> None:
    """`rg-countdown` on the tiny model, 1 step: each answer lands in the experience store scored by countdown's
    verifier (one of its scores), and the held-out problems are evaluated."""
    from mlflow.tracking import MlflowClient

    from checkpointing.layout import BUFFER_DB
    from flows.rft import rft
    from tracking import tracking_uri

    config = load_recipe("rg-countdown").with_overrides({
        "checkpoint_root_dir": str(tmp_path), "model.model_path": tiny_model_path, "buffer.total_steps": 1,
        "algorithm.repeat_times": 4, "explorer.eval_interval": 1, "trainer.save_interval": 1,
        "model.max_response_tokens": 32,
        f"{_TS}.generator_args.train_size": 50, f"{_TS}.generator_args.test_size": 20,
        "buffer.explorer_input.eval_tasksets.0.generator_args.train_size": 50,
        "buffer.explorer_input.eval_tasksets.0.generator_args.test_size": 20,
        "buffer.explorer_input.eval_tasksets.0.split": "test[:2]",
    })
    outcome = rft(config=config)[config.name]
    assert outcome["steps"] == 1
    with sqlite3.connect(config.experiment_dir / BUFFER_DB) as db:
        rows = [(step, json.loads(data)) for step, data in db.execute("SELECT train_step, data FROM experiences")]
    assert len(rows) == 2 * 4 and {step for step, _ in rows} == {1}
    for _, exp in rows:
        assert exp["reward"] in (0.0, 0.01, 0.05, 1.0), exp["reward"]
    client = MlflowClient(tracking_uri=tracking_uri(config))
    assert client.get_metric_history(outcome["mlflow_run_id"], "eval/rg-countdown-eval/strict")
