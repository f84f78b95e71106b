"""Rollouts on the policy's engines: what explore and evaluate share."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import algorithms
from backends.errors import PartLost
from backends.policy import Policy, policy_for
from backends.rollout import RolloutEngine, TopScores
from buffer.experience import Experience
from buffer.taskset import Task
from schemas import ExperimentConfig
from tasks.setup import revive_engines
from workflows.auxiliary import AuxiliaryModel
from workflows.render import renderer_for
from workflows.runner import AllTasksFailedError, RunnerResult, WorkflowRunner


def run_workflows(
    config: ExperimentConfig, tasks: Sequence[Task], step: int, repeat_times: int, runners: int | None = None,
    on_task_done: Callable[[int, int], None] | None = None,
) -> RunnerResult:
    """Every task's workflow once, on the policy's engines (revived first if one died): prompts over
    model.max_prompt_tokens skipped, each task tried up to explorer.max_retry_times more times and given
    explorer.max_timeout seconds an attempt; `runners` workflows at a time per engine (default
    explorer.runner_per_model); `on_task_done(done, total)` after each task (WorkflowRunner.run).

    An engine that dies during the batch fails the whole batch (a transient error: the task's retry
    revives the engine and samples the batch again), so no task's rollouts are lost or kept twice.
    """
    revive_engines(config)  # a retry after an engine crash gets a working one
    model, explorer = config.model, config.explorer
    renderer = renderer_for(model.model_path, model.custom_chat_template, explorer.rollout_model.enable_thinking)
    policy = policy_for(config)
    runner = WorkflowRunner(policy.engines(), renderer, runners or explorer.runner_per_model,
                            auxiliary=auxiliary_models(config, policy))
    try:
        result = runner.run(
            tasks,
            explore_step=step,
            repeat_times=repeat_times,
            max_tokens=model.max_response_tokens,
            default_workflow_type=config.buffer.explorer_input.default_workflow_type,
            max_prompt_tokens=model.max_prompt_tokens,
            min_tokens=model.min_response_tokens,
            max_retry_times=explorer.max_retry_times,
            max_timeout=explorer.max_timeout,
            on_task_done=on_task_done,
        )
    except AllTasksFailedError as err:
        if revive_engines(config):
            raise PartLost(f"a rollout engine died during the batch of step {step}: {err}") from err
        raise
    if result.failures and (revived := revive_engines(config)):
        raise PartLost(f"rollout engine(s) {', '.join(revived)} died during the batch of step {step}: sampling it again")
    return result


def auxiliary_models(config: ExperimentConfig, policy: Policy) -> dict[str, AuxiliaryModel]:
    """explorer.auxiliary_models as workflows reach them: by name, each its engines and its chat template."""
    return {m.auxiliary_name(): AuxiliaryModel(m.auxiliary_name(), policy.auxiliary_engines(j), renderer_for(m.model_path))
            for j, m in enumerate(config.explorer.auxiliary_models)}


def score_with_teacher(config: ExperimentConfig, experiences: list[Experience]) -> None:
    """Set each experience's `teacher_logprobs`: the first auxiliary model's log-prob of every response token
    after the same prompt (on-policy distillation; the teacher shares the student's tokenizer). A loss over the
    teacher's top k (topk_distill) gets the k likeliest tokens at each position too (`teacher_topk_*`)."""
    if not experiences:
        return
    alg = config.algorithm
    k = algorithms.teacher_topk(alg.policy_loss_fn, alg.policy_loss_fn_args)
    teachers = policy_for(config).auxiliary_engines(0)
    sequences = [e.prompt_token_ids + e.response_token_ids for e in experiences]
    starts = [len(e.prompt_token_ids) for e in experiences]
    share = -(-len(sequences) // len(teachers))  # a slice per engine of the teacher
    slices = [slice(i * share, (i + 1) * share) for i in range(len(teachers)) if i * share < len(sequences)]

    def score(teacher: RolloutEngine, part: slice) -> list[TopScores]:
        return teacher.score(sequences[part], starts[part], k)  # k = 0: the given tokens' log-probs only

    # Each engine scores its slice at the same time as the others (a call blocks until its engine is done).
    with ThreadPoolExecutor(max_workers=len(slices)) as pool:
        scored = [scores for part in pool.map(score, teachers, slices) for scores in part]
    for exp, scores in zip(experiences, scored, strict=True):
        exp.teacher_logprobs = scores.logprobs
        if k:
            exp.teacher_topk_ids, exp.teacher_topk_logprobs = scores.top_ids, scores.top_logprobs
