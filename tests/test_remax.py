"""ReMax (advantage_fn 'remax'): each sample's reward minus its task's greedy answer's. The arithmetic, the
settings refused, and a whole run (the `hello` recipe on the tiny model, vLLM CPU, the torch trainer) in which the
explorer samples each task once greedily beside its group and trains on the group only."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

import algorithms
from buffer.experience_store import ExperienceStore
from deployments import load_recipe
from tracking import tracking_uri

TARGET = "I am Rift, a small assistant trained with rft."


def test_the_advantage_is_the_reward_minus_the_greedy_answers() -> None:
    algorithm = load_recipe("hello").with_overrides({"algorithm.advantage_fn": "remax"}).algorithm
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.1, 0.1, 0.0])
    baselines = torch.tensor([0.0, 0.0, 0.0, 1.1, 1.1, 1.1])  # task 1's greedy answer wrong, task 2's right
    advantages = algorithms.compute_advantages(algorithm, rewards, ["a"] * 3 + ["b"] * 3, torch.ones(6, 2), baselines)
    assert advantages[:, 0].tolist() == pytest.approx([1.0, 0.0, 0.0, 0.0, -1.0, -1.1])
    assert advantages[:, 1].tolist() == advantages[:, 0].tolist()  # the same on every response token


def test_without_the_greedy_rewards_it_says_what_it_needs() -> None:
    algorithm = load_recipe("hello").with_overrides({"algorithm.advantage_fn": "remax"}).algorithm
    with pytest.raises(ValueError, match="remax' needs the greedy answer's reward"):
        algorithms.compute_advantages(algorithm, torch.tensor([1.0, 0.0]), ["a", "a"], torch.ones(2, 1))


def test_a_kl_penalty_in_the_reward_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"algorithm.kl_penalty_fn.*remax's baseline"):
        load_recipe("hello").with_overrides({"algorithm.advantage_fn": "remax", "algorithm.kl_penalty_fn": "k1",
                                             "algorithm.kl_penalty_fn_args": {"kl_coef": 0.01}})


@pytest.mark.slow
def test_a_run_samples_each_task_greedily_and_trains_on_its_samples_only(tmp_path: Path, tiny_model_path: str) -> None:
    """Both tasks of a step have the same prompt, so at temperature 0 their greedy answers, and their baselines,
    are the same; sampled at temperature 1 the tiny model's answers differ."""
    from flows.rft import rft

    taskset = tmp_path / "who.jsonl"
    taskset.write_text("".join(json.dumps({"prompt": "Who are you?", "target": TARGET}) + "\n" for _ in range(8)))
    config = load_recipe("hello").with_overrides({
        "name": "remax", "checkpoint_root_dir": str(tmp_path), "cluster.ray_address": "local",
        "model.model_path": tiny_model_path, "model.max_response_tokens": 8,
        "buffer.explorer_input.taskset.name": "who", "buffer.explorer_input.taskset.path": str(taskset),
        "buffer.explorer_input.eval_tasksets": [], "explorer.eval_on_startup": False,
        "buffer.total_steps": 2, "buffer.batch_size": 2, "algorithm.repeat_times": 4,
        "algorithm.advantage_fn": "remax", "trainer.save_interval": 2,
    })
    outcome = rft(config=config)[config.name]
    assert outcome["steps"] == 2
    with ExperienceStore.for_experiment(config.experiment_dir) as store:
        stored, trained = store.experiences(), store.trained_eids()
    assert len(stored) == 2 * 2 * 4 and not [e for e in stored if "#greedy" in e.task_id]  # the greedy ones: not kept
    assert {e.eid: e.explore_step for e in stored} == trained  # each sample trained once, by its own step
    groups: dict[str, list] = defaultdict(list)
    for exp in stored:
        assert exp.advantage == pytest.approx(exp.reward - exp.info["reward_baseline"], abs=1e-6)
        groups[exp.group_id].append(exp)
    assert sorted(len(g) for g in groups.values()) == [4] * 4
    by_step: dict[int, set[float]] = defaultdict(set)
    for members in groups.values():
        assert len({e.info["reward_baseline"] for e in members}) == 1
        by_step[members[0].explore_step].add(members[0].info["reward_baseline"])
    assert all(len(baselines) == 1 for baselines in by_step.values()), by_step  # greedy: the same answer
    assert len({e.reward for e in stored}) > 1  # sampled: not
    history = MlflowClient(tracking_uri=tracking_uri(config)).get_metric_history(outcome["mlflow_run_id"],
                                                                                   "explore/greedy_reward_mean")
    assert {m.step: m.value for m in history} == {k: v.pop() for k, v in sorted(by_step.items())}
