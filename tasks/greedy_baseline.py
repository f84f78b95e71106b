"""The greedy answer to each task, sampled beside its group for the baseline of ReMax's advantages.

The greedy copies run in the same engine call as the samples (each a task of its own, repeat 1, temperature 0),
so they cost one more sequence per task, not another round. They are scored as the samples are and never stored
or trained on: what each sample keeps is its task's greedy reward, in ``info["reward_baseline"]``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

from buffer.experience import Experience
from buffer.taskset import Task
from schemas.taskset import GenerationConfig
from workflows.runner import RunnerResult

logger = logging.getLogger(__name__)

GREEDY = "#greedy"  # task_id suffix of a task's greedy copy
BASELINE = "reward_baseline"  # Experience.info key of the greedy answer's reward


def greedy_copy(task: Task) -> Task:
    """The task sampled once at temperature 0, under its own task id."""
    args = task.rollout_args or GenerationConfig()
    return replace(task, task_id=task.task_id + GREEDY, repeat_times=1,
                   rollout_args=args.model_copy(update={"temperature": 0.0}))


def with_greedy_baselines(run: Callable[[Sequence[Task]], RunnerResult], tasks: Sequence[Task]) -> RunnerResult:
    """`run` over the tasks and their greedy copies: the samples' result, each sample's ``info`` holding its
    task's greedy reward. A task whose greedy copy failed gets its group's mean reward as baseline, with a
    warning, so the step still trains."""
    result = run([*tasks, *(greedy_copy(t) for t in tasks)])
    greedy: dict[str, list[float]] = {}
    for exp in result.experiences:
        if exp.task_id.endswith(GREEDY):  # a multi-turn episode may hold several: their mean
            greedy.setdefault(exp.task_id.removesuffix(GREEDY), []).append(exp.reward)
    samples = [e for e in result.experiences if not e.task_id.endswith(GREEDY)]
    groups: dict[str, list[float]] = {}
    for exp in samples:
        groups.setdefault(exp.group_id, []).append(exp.reward)
    missing = {e.task_id for e in samples if e.task_id not in greedy}
    for exp in samples:
        rewards = greedy.get(exp.task_id) or groups[exp.group_id]
        exp.info[BASELINE] = sum(rewards) / len(rewards)
    for task_id in sorted(missing):
        logger.warning("task %s: its greedy answer failed, so its samples' baseline is their group's mean reward",
                       task_id)
    failures = [f for f in result.failures if not f.task_id.endswith(GREEDY)]
    too_long = [f for f in result.too_long if not f.task_id.endswith(GREEDY)]
    return replace(result, experiences=samples, failures=failures, too_long=too_long, num_tasks=len(tasks))


def greedy_metrics(experiences: Sequence[Experience]) -> dict[str, float]:
    """The mean reward of the step's greedy answers (one per group), as the evaluation would score them."""
    greedy = {e.group_id: e.info[BASELINE] for e in experiences if BASELINE in e.info}
    return {"explore/greedy_reward_mean": sum(greedy.values()) / len(greedy)} if greedy else {}
