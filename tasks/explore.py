"""Explore: sample rollouts of one batch of tasks, score them, and persist them as experiences."""

from __future__ import annotations

import torch
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

import algorithms
from buffer.experience import Experience
from buffer.experience_store import ExperienceStore
from buffer.taskset import TasksetReader, load_taskset
from checkpointing.layout import experiment_dir
from schemas import ExperimentConfig
from tasks.failures import transient_only
from tasks.rollouts import run_workflows
from workflows.multi_turn import episode_stats


def taskset_reader(config: ExperimentConfig, step: int) -> TasksetReader:
    """The training taskset's reader, positioned at the batch of explore step `step`.

    The position is a function of the step alone (batches are deterministic, failed tasks still
    consume their place), so a resumed run reads exactly what an uninterrupted one would.
    """
    taskset = config.buffer.explorer_input.taskset
    if taskset is None:
        raise ValueError("buffer.explorer_input.taskset: exploring needs a taskset")
    reader = TasksetReader.for_taskset(
        load_taskset(taskset), taskset, config.buffer.batch_size, config.buffer.total_epochs
    )
    for _ in range(step - 1):
        reader.read()
    return reader


def fill_advantages(config: ExperimentConfig, experiences: list[Experience]) -> None:
    """Outcome advantages per group, computed where whole groups are at hand (as Trinity does)."""
    if not experiences:
        return
    rewards = torch.tensor([e.reward for e in experiences], dtype=torch.float32)
    mask = torch.ones((len(experiences), 1), dtype=torch.float32)
    advantages = algorithms.compute_advantages(config.algorithm, rewards, [e.group_id for e in experiences], mask)
    for exp, adv in zip(experiences, advantages[:, 0].tolist(), strict=True):
        exp.advantage = float(adv)


@task(name="explore-step", retries=1, retry_delay_seconds=5, retry_condition_fn=transient_only, cache_policy=NO_CACHE)
def explore_step(config: ExperimentConfig, step: int) -> dict[str, float]:
    """Roll out `batch_size` tasks × repeat_times on the engines into the experience buffer."""
    logger = get_run_logger()
    store = ExperienceStore.for_experiment(experiment_dir(config))
    try:
        if store.max_explore_step() >= step:  # a retried run already explored this step
            logger.info("explore step %d already in the buffer (resumed run): not sampling it again", step)
            stats = store.reward_stats(explore_step=step)
            return {"explore/reward_mean": stats["mean"], "explore/reward_std": stats["std"],
                    "explore/experiences": float(stats["count"]), "explore/resumed": 1.0}
        tasks = taskset_reader(config, step).read()
        result = run_workflows(config, tasks, step, config.algorithm.repeat_times or 1)
        for failure in result.failures:
            logger.warning("task %s failed: %s", failure.task_id, failure.error)
        for skipped in result.too_long:
            logger.warning("%s", skipped.error)
        fill_advantages(config, result.experiences)
        store.put(result.experiences)
    finally:
        store.close()
    stats = result.stats
    accuracy = [e.reward_breakdown.get("accuracy", 0.0) for e in result.experiences]
    measures = {  # the training samples' strict / lenient / format, as evaluation counts them
        f"explore/{key}": sum(e.reward_breakdown[key] for e in result.experiences) / len(result.experiences)
        for key in ("strict", "lenient", "format")
        if result.experiences and all(key in e.reward_breakdown for e in result.experiences)
    }
    return measures | {
        "explore/reward_mean": stats["reward_mean"],
        "explore/reward_std": float(torch.tensor([e.reward for e in result.experiences]).std()) if len(result.experiences) > 1 else 0.0,
        "explore/accuracy": sum(accuracy) / len(accuracy) if accuracy else 0.0,
        "explore/response_length": stats["response_length_mean"],
        "explore/rollout_tokens_per_s": stats["rollout_tokens_per_s"],
        "explore/tasks_failed": stats["tasks_failed"],
        "explore/prompts_too_long": stats["prompts_too_long"],
        "explore/task_retries": stats["task_retries"],
        "explore/task_timeouts": stats["task_timeouts"],
        "explore/experiences": stats["experiences"],
        # what the step cost in tokens (tracking/usage.py: the budget counts the sampled ones)
        "explore/tokens_sampled": float(sum(len(e.response_token_ids) for e in result.experiences)),
        "explore/tokens_prompt": float(sum(len(e.prompt_token_ids) for e in result.experiences)),
        "time/explore_s": stats["seconds"],
        **{f"explore/{k}": v for k, v in episode_stats(result.experiences).items()},  # multi-turn workflows
    }
