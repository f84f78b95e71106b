"""A task: one row of a taskset and what a workflow needs to run it (its own module: the task selectors and the
taskset reader both use it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Task:
    """One row of a taskset plus everything a workflow needs to run it."""

    task_id: str  # stable: "{taskset name}/{split}/{absolute row index}"
    raw: dict[str, Any]
    format: Any = None  # schemas.TaskFormat of the taskset (a dataset row: its DataFormat)
    rollout_args: Any = None  # schemas rollout args (temperature, top_p, top_k, logprobs, max_tokens)
    workflow_args: dict[str, Any] = field(default_factory=dict)
    reward_fn_args: dict[str, Any] = field(default_factory=dict)
    repeat_times: int | None = None  # per-taskset override of algorithm.repeat_times
    workflow_type: str | None = None  # key into the workflow registry
    reward_fn_type: str | None = None
    taskset_name: str = ""
