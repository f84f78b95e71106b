"""Explore: sample rollouts of one batch of tasks, score them, and persist them as experiences."""

from __future__ import annotations

import torch
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

import algorithms
from algorithms.advantage.gigpo import gigpo_advantages
from buffer import selector_state
from buffer.dynamic_sampling import FilledStep, fill_step, split_by_variance
from buffer.experience import Experience
from buffer.experience_store import ExperienceStore
from buffer.operators import run_pipeline
from buffer.taskset import Task, TasksetReader, load_taskset
from checkpointing.layout import experiment_dir
from schemas import ExperimentConfig
from tasks.failures import transient_only
from tasks.greedy_baseline import BASELINE, greedy_metrics, with_greedy_baselines
from tasks.rollouts import run_workflows, score_with_teacher
from tasks.usage import SideUsage
from workflows.multi_turn import episode_stats
from workflows.runner import RunnerResult


def taskset_reader(config: ExperimentConfig, step: int, batches_before: int | None = None,
                   store: ExperienceStore | None = None) -> TasksetReader:
    """The training taskset's reader, positioned at the batch of explore step `step`: after `batches_before`
    batches (what the earlier steps read, as the experience store records it; default one a step). A batch is
    buffer.batch_size tasks, or with dynamic sampling a round of algorithm.filter_groups.gen_batch_size.
    An adaptive selector (difficulty_based) is brought to what it had learnt by then from `store`
    (buffer/selector_state.py; without a store: nothing learnt).

    Batches are deterministic and failed tasks still consume their place, so a resumed or retried step
    reads exactly what an uninterrupted one would. With dynamic sampling a step may read several batches,
    and reads on past buffer.total_epochs: the run keeps its planned steps.
    """
    taskset = config.buffer.explorer_input.taskset
    if taskset is None:
        raise ValueError("buffer.explorer_input.taskset: exploring needs a taskset")
    filter_groups = config.algorithm.filter_groups
    epochs = None if filter_groups.enable else config.buffer.total_epochs
    size = config.buffer.batch_size
    if filter_groups.enable and filter_groups.gen_batch_size:
        size = filter_groups.gen_batch_size
    reader = TasksetReader.for_taskset(load_taskset(taskset), taskset, size, epochs)
    reader.skip(step - 1 if batches_before is None else batches_before)
    if store is not None and reader.picker.adaptive:
        how = selector_state.restore(reader, experiment_dir(config), store, step)
        get_run_logger().info("explore step %d: task selector %s: %s", step, reader.selector, how)
    return reader


def merged(results: list[RunnerResult]) -> RunnerResult:
    """The rounds of one explore step as one batch (what the step's metrics describe)."""
    return RunnerResult(
        experiences=[e for r in results for e in r.experiences], failures=[f for r in results for f in r.failures],
        num_tasks=sum(r.num_tasks for r in results), seconds=sum(r.seconds for r in results),
        generate_calls=sum(r.generate_calls for r in results), too_long=[f for r in results for f in r.too_long],
        retries=sum(r.retries for r in results), timeouts=sum(r.timeouts for r in results),
    )


def sample(config: ExperimentConfig, step: int, reader: TasksetReader) -> tuple[RunnerResult, FilledStep | None]:
    """Explore step `step`'s rollouts of the batches `reader` hands out: one batch of tasks, or with
    algorithm.filter_groups as many as dynamic sampling needs to fill the step (None: it is off). Nothing is
    written: the caller stores it all at once."""
    logger = get_run_logger()
    repeat = config.algorithm.repeat_times or 1
    filter_groups = config.algorithm.filter_groups

    def rollouts(tasks: list[Task]) -> RunnerResult:
        if not algorithms.needs_greedy_baseline(config.algorithm):
            return run_workflows(config, tasks, step, repeat)
        return with_greedy_baselines(lambda both: run_workflows(config, both, step, repeat), tasks)

    if not filter_groups.enable:
        return rollouts(reader.read()), None
    rounds: list[RunnerResult] = []

    def sample_round(index: int) -> list[Experience]:
        if index:  # live progress: an extra round costs as much as the step did
            differ = split_by_variance([e for r in rounds for e in r.experiences], filter_groups.metric)[0]
            logger.info("dynamic sampling: explore step %d, round %d of at most %d (%d groups differ so far, %d wanted)",
                        step, index + 1, filter_groups.max_num_gen_batches, len({e.group_id for e in differ}),
                        config.buffer.batch_size)
        rounds.append(rollouts(reader.read()))
        return rounds[-1].experiences

    filled = fill_step(sample_round, config.buffer.batch_size, filter_groups.max_num_gen_batches, filter_groups.metric)
    return merged(rounds), filled


def fill_advantages(config: ExperimentConfig, experiences: list[Experience]) -> dict[str, float]:
    """Outcome advantages per group, computed where whole groups are at hand (as Trinity does). GAE
    (advantage_fn 'ppo') needs the critic's values: the trainer computes those, and these stay None.
    A teacher's advantages (on_policy_distill, jsd) are per token, from `teacher_logprobs`; GiGPO's (gigpo)
    per model turn, from each episode's steps (algorithms/advantage/gigpo.py). Returns the advantage's metrics
    (gigpo's step groups; {} for the others)."""
    if not experiences or algorithms.needs_critic(config.algorithm):
        return {}
    if algorithms.needs_steps(config.algorithm):  # per model turn, from the states and rewards of each episode's steps
        alg = config.algorithm
        return gigpo_advantages(experiences, algorithms.ADVANTAGE_FNS.resolve_args(alg.advantage_fn,
                                                                                   alg.advantage_fn_args))
    if algorithms.needs_teacher(config.algorithm):  # per token, from the teacher's log-probs
        alg = config.algorithm
        args = algorithms.ADVANTAGE_FNS.resolve_args(alg.advantage_fn, alg.advantage_fn_args)
        for exp in experiences:
            exp.token_advantages = algorithms.teacher_advantages(alg.advantage_fn, exp.logprobs, exp.teacher_logprobs or [],
                                                                 args)
            exp.advantage = sum(exp.token_advantages) / max(len(exp.token_advantages), 1)
        return {}
    rewards = torch.tensor([e.reward for e in experiences], dtype=torch.float32)
    mask = torch.ones((len(experiences), 1), dtype=torch.float32)
    baselines = None
    if algorithms.needs_greedy_baseline(config.algorithm):  # ReMax: the greedy answer's reward (tasks/greedy_baseline.py)
        baselines = torch.tensor([e.info[BASELINE] for e in experiences], dtype=torch.float32)
    advantages = algorithms.compute_advantages(config.algorithm, rewards, [e.group_id for e in experiences], mask,
                                               baselines)
    for exp, adv in zip(experiences, advantages[:, 0].tolist(), strict=True):
        exp.advantage = float(adv)
    return {}


def experience_pipeline(
    config: ExperimentConfig, step: int, experiences: list[Experience]
) -> tuple[list[Experience], list[Experience], dict[str, float]]:
    """data_processor.experience_pipeline's operators over the step's scored experiences (buffer/operators.py),
    before the advantages: those kept, those its filters left out, its metrics. With save_input the experiences
    as they came are appended to a JSON-lines file first."""
    pipeline = config.data_processor.experience_pipeline
    if pipeline is None or not pipeline.operators:
        return experiences, [], {}
    if pipeline.save_input:
        path = experiment_dir(config) / (pipeline.input_save_path or "experience_pipeline/input.jsonl")
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            out.writelines(e.to_json() + "\n" for e in experiences)
    kept, metrics = run_pipeline([(op.name, op.args) for op in pipeline.operators], experiences)
    get_run_logger().info("explore step %d: the experience pipeline kept %d of %d experiences", step, len(kept),
                          len(experiences))
    kept_eids = {e.eid for e in kept}  # a mapper keeps an experience's eid
    return kept, [e for e in experiences if e.eid not in kept_eids], metrics


@task(name="explore-step", retries=1, retry_delay_seconds=5, retry_condition_fn=transient_only, cache_policy=NO_CACHE)
def explore_step(config: ExperimentConfig, step: int) -> dict[str, float]:
    """Roll out `batch_size` tasks × repeat_times on the engines into the experience buffer (with
    algorithm.filter_groups: the groups whose rewards differ, from as many batches as it takes)."""
    logger = get_run_logger()
    store = ExperienceStore.for_experiment(experiment_dir(config))
    try:
        if store.max_explore_step() >= step:  # a retried run already explored this step
            logger.info("explore step %d already in the buffer (resumed run): not sampling it again", step)
            stats = store.reward_stats(explore_step=step)
            return {"explore/reward_mean": stats["mean"], "explore/reward_std": stats["std"],
                    "explore/experiences": float(stats["count"]), "explore/resumed": 1.0}
        reader = taskset_reader(config, step, store.taskset_batches_before(step), store)
        usage = SideUsage(config, "explore")
        result, filled = sample(config, step, reader)
        selector_metrics = reader.picker.metrics(reader.picked)  # what it expected of the tasks it picked
        if algorithms.needs_teacher(config.algorithm):
            score_with_teacher(config, result.experiences)
        used = usage.metrics("explore")
        for failure in result.failures:
            logger.warning("task %s failed: %s", failure.task_id, failure.error)
        # a bug that fails most tasks stops the run here, before its step trains on the few left
        result.check_failed_share(config.explorer.max_failed_task_ratio, f"explore step {step}")
        for skipped in result.too_long:
            logger.warning("%s", skipped.error)
        pipeline_metrics: dict[str, float] = {}
        advantage_metrics: dict[str, float] = {}
        # what the pipeline's filters leave out is stored as dropped by this step: recorded, never trained, and
        # a step they empty still counts as explored (a resumed run does not sample it again)
        if filled is None:
            result.experiences, left_out, pipeline_metrics = experience_pipeline(config, step, result.experiences)
            advantage_metrics = fill_advantages(config, result.experiences)
            store.put(result.experiences, dropped=left_out)
        else:  # kept and dropped at once, with the batches read: a retry neither trains one twice nor loses one
            filled.kept, left_out, pipeline_metrics = experience_pipeline(config, step, filled.kept)
            advantage_metrics = fill_advantages(config, filled.kept)
            fill_advantages(config, filled.dropped)
            store.put(filled.kept, dropped=[*filled.dropped, *left_out], batches=(step, filled.rounds))
            logger.info("explore step %d: %d groups kept, %d dropped as all-equal, %d round(s)", step,
                        len({e.group_id for e in filled.kept}), filled.groups_dropped, filled.rounds)
        selector_state.record(reader, experiment_dir(config), store, step)  # learns from what was just stored
    finally:
        store.close()
    stats = result.stats
    accuracy = [e.reward_breakdown.get("accuracy", 0.0) for e in result.experiences]
    measures = {  # the training samples' strict / lenient / format, as evaluation counts them (+ math_workflow's wrong_steps)
        f"explore/{key}": sum(e.reward_breakdown[key] for e in result.experiences) / len(result.experiences)
        for key in ("strict", "lenient", "format", "wrong_steps")
        if result.experiences and all(key in e.reward_breakdown for e in result.experiences)
    }
    return measures | greedy_metrics(result.experiences) | {f"explore/{k}": v for k, v in pipeline_metrics.items()} | {
        f"explore/{k}": v for k, v in advantage_metrics.items()} | {
        "explore/reward_mean": stats["reward_mean"],
        "explore/reward_std": float(torch.tensor([e.reward for e in result.experiences]).std()) if len(result.experiences) > 1 else 0.0,
        "explore/accuracy": sum(accuracy) / len(accuracy) if accuracy else 0.0,
        "explore/response_length": stats["response_length_mean"],
        "explore/rollout_tokens_per_s": stats["rollout_tokens_per_s"],
        "explore/tasks_failed": stats["tasks_failed"],
        "explore/tasks_failed_share": result.failed_share,
        "explore/prompts_too_long": stats["prompts_too_long"],
        "explore/task_retries": stats["task_retries"],
        "explore/task_timeouts": stats["task_timeouts"],
        "explore/experiences": stats["experiences"],
        # what the step cost in tokens (tracking/usage.py: the budget counts the sampled ones)
        "explore/tokens_sampled": float(sum(len(e.response_token_ids) for e in result.experiences)),
        "explore/tokens_prompt": float(sum(len(e.prompt_token_ids) for e in result.experiences)),
        "time/explore_s": stats["seconds"],
        **used,  # the engines' CPU seconds and GPUs
        **{f"explore/{k}": v for k, v in episode_stats(result.experiences).items()},  # multi-turn workflows
        **(filled.metrics() if filled is not None else {}),
        **teacher_metrics(result.experiences),
        **{f"explore/{k}": v for k, v in selector_metrics.items()},
    }


def teacher_metrics(experiences: list[Experience]) -> dict[str, float]:
    """How far the student's samples are from the teacher (on-policy distillation): the reverse KL estimate
    per sequence (sum over its tokens of student − teacher log-prob), and per token."""
    scored = [e for e in experiences if e.teacher_logprobs is not None]
    if not scored:
        return {}
    gaps = [sum(e.logprobs) - sum(e.teacher_logprobs or ()) for e in scored]
    tokens = sum(len(e.logprobs) for e in scored)
    return {"explore/teacher_kl": sum(gaps) / len(gaps), "explore/teacher_kl_per_token": sum(gaps) / max(tokens, 1)}
