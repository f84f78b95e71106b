"""The data: every taskset, eval set and SFT (DPO) dataset exists and parses with the keys its workflow reads (and the
training taskset's rows hold the feature_keys its task selector reads)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from algorithms import is_preference_loss
from backends.errors import ConfigError
from buffer.selectors import SelectorError, build_selector
from buffer.taskset import TasksetError, load_taskset, resolve_local_path
from preflight.errors import PreflightError
from preflight.services import HF_HUB, hub_unreachable
from schemas import ExperimentConfig, TasksetConfig
from schemas.algorithm_registry import ALGORITHM_PRESETS
from schemas.stage_kind import stage_kind


def check_tasksets(config: ExperimentConfig) -> list[str]:
    """Every taskset and eval set: its file exists and every row parses with the keys its workflow reads
    (a malformed line is named file:line); hub datasets: the hub answers."""
    explorer_input, kind = config.buffer.explorer_input, stage_kind(config)
    todo: list[tuple[str, TasksetConfig, list[str]]] = []
    if explorer_input.taskset is not None and kind.explores:
        workflow = explorer_input.taskset.default_workflow_type or explorer_input.default_workflow_type
        todo.append(("buffer.explorer_input.taskset", explorer_input.taskset, _workflow_keys(explorer_input.taskset, workflow)))
    if kind.explores or kind.flow == "bench":  # the stages that evaluate on their engines
        for i, taskset in enumerate(explorer_input.eval_tasksets):
            workflow = (taskset.default_workflow_type or explorer_input.default_eval_workflow_type
                        or explorer_input.default_workflow_type)
            todo.append((f"buffer.explorer_input.eval_tasksets.{i}", taskset, _workflow_keys(taskset, workflow)))
    if not ALGORITHM_PRESETS[config.algorithm.algorithm_type].needs_rollout:  # a dataset's rows: SFT rows or pairs
        dataset = config.buffer.trainer_input.experience_buffer
        if dataset is not None and dataset.storage_type == "file":
            keys = dataset.format.row_keys(pairs=is_preference_loss(config.algorithm.policy_loss_fn))
            todo.append(("buffer.trainer_input.experience_buffer", dataset, keys))
    lines, problems = [], []
    for field, taskset, keys in todo:
        try:
            generated = taskset.path.startswith("generator:")  # rows made in memory (generators/)
            if taskset.path and not generated and resolve_local_path(taskset.path) is None and not _looks_local(taskset.path):
                lines.append(f"{field}: {_hub_dataset(f'{field}.path', taskset.path)}")
                continue
            with _quiet("datasets"):  # its own report of a bad line says less than ours
                tasks = load_taskset(taskset, required_keys=keys)
            if field == "buffer.explorer_input.taskset":  # a selector that reads features has them in every row
                try:
                    build_selector(tasks, taskset.task_selector)
                except SelectorError as err:
                    raise ConfigError(f"{field}.task_selector.feature_keys", str(err)) from None
        except TasksetError as err:
            problems.append(ConfigError(f"{field}.path", str(err)))
            continue
        except ConfigError as err:
            problems.append(err)
            continue
        lines.append(f"{field}: {len(tasks)} tasks of {taskset.path} [{taskset.split}] with keys {', '.join(keys)}")
    if problems:
        raise PreflightError(problems)
    return lines


@contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    log = logging.getLogger(logger_name)
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


def _hub_dataset(field: str, path: str) -> str:
    reason = hub_unreachable()
    if reason:
        raise ConfigError(field, f"{path!r} is not a local file or folder, and the Hugging Face hub ({HF_HUB}) does "
                          f"not answer ({reason})")
    return f"{path} (from {HF_HUB})"


def _looks_local(path: str) -> bool:
    return path.startswith((".", "/", "~")) or Path(path).suffix in (".jsonl", ".json", ".parquet") or path.count("/") > 1


def _workflow_keys(taskset: TasksetConfig, workflow: str | None) -> list[str]:
    if not workflow:
        return [taskset.format.prompt_key]
    from workflows import get_workflow

    return get_workflow(workflow).required_keys(taskset.format)
