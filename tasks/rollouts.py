"""Rollouts on the policy's engines: what explore and evaluate share."""

from __future__ import annotations

from collections.abc import Sequence

from backends.policy import policy_for
from buffer.taskset import Task
from schemas import ExperimentConfig
from tasks.setup import revive_engines
from workflows.render import renderer_for
from workflows.runner import RunnerResult, WorkflowRunner


def run_workflows(config: ExperimentConfig, tasks: Sequence[Task], step: int, repeat_times: int) -> RunnerResult:
    """Every task's workflow once, on the policy's engines (revived first if one died)."""
    revive_engines(config)  # a retry after an engine crash gets a working one
    renderer = renderer_for(config.model.model_path, config.model.custom_chat_template)
    return WorkflowRunner(policy_for(config).engines(), renderer, config.explorer.runner_per_model).run(
        tasks,
        explore_step=step,
        repeat_times=repeat_times,
        max_tokens=config.model.max_response_tokens,
        default_workflow_type=config.buffer.explorer_input.default_workflow_type,
    )
