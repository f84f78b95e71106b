"""Evaluate: run an eval taskset on the engines and score it (nothing enters the training buffer)."""

from __future__ import annotations

from collections import defaultdict

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from buffer.taskset import load_taskset
from schemas import ExperimentConfig
from tasks.rollouts import run_workflows
from workflows.multi_turn import episode_stats


@task(name="evaluate-taskset", retries=1, retry_delay_seconds=5, cache_policy=NO_CACHE)
def evaluate_taskset(config: ExperimentConfig, index: int, step: int) -> dict:
    """Returns {"name", "metrics": {...}, "rows": [per-task results]} for eval taskset `index`."""
    taskset = config.buffer.explorer_input.eval_tasksets[index]
    tasks = load_taskset(taskset)
    repeat = taskset.repeat_times or 1
    result = run_workflows(config, tasks, step, repeat)
    by_task: dict[str, list] = defaultdict(list)
    for exp in result.experiences:
        by_task[exp.task_id].append(exp)
    correct = [exp.reward_breakdown.get("accuracy", 0.0) for exp in result.experiences]
    n = max(len(result.experiences), 1)
    metrics = {
        "accuracy": sum(correct) / n,
        "reward_mean": sum(e.reward for e in result.experiences) / n,
        "response_length": sum(len(e.response_token_ids) for e in result.experiences) / n,
        "tasks": float(len(tasks)),
        "tasks_failed": float(len(result.failures)),
        "prompts_too_long": float(len(result.too_long)),
        **episode_stats(result.experiences),  # turns per episode and success rate of multi-turn workflows
    }
    if repeat > 1:
        solved = [any(e.reward_breakdown.get("accuracy", 0.0) >= 1.0 for e in exps) for exps in by_task.values()]
        metrics[f"pass@{repeat}"] = sum(solved) / max(len(solved), 1)
    rows = [
        {
            "task_id": task_id,
            "accuracy": sum(e.reward_breakdown.get("accuracy", 0.0) for e in exps) / len(exps),
            "reward": sum(e.reward for e in exps) / len(exps),
            "response": exps[0].response_text[-300:],
        }
        for task_id, exps in by_task.items()
    ]
    get_run_logger().info("eval %s at step %d: accuracy %.3f on %d tasks", taskset.name, step, metrics["accuracy"], len(tasks))
    return {"name": taskset.name, "metrics": metrics, "rows": rows}
