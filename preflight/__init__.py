"""Pre-flight: what a run needs from outside, checked in seconds before any engine or actor starts.

Each check is named after the setting it checks and raises `ConfigError` naming it (the field, or the
environment variable it came from); `preflight` runs them all and reports every problem at once. The
`check-requirements` task runs it before anything starts, and `rft validate --check` runs it alone.

    services.py  cluster              the Ray cluster's address answers (or the policy's service: its own preflight)
    model.py     model.model_path     a folder (or cached id) whose config and tokenizer load, and whose chat
                                      template opens the assistant's turn
    data.py      buffer...            every taskset and eval set exists and parses with the keys its workflow reads
    disk.py      checkpoint_root_dir  creatable, writable, with room for the checkpoints the run will write
    services.py  MLflow               the tracking server answers within seconds (SQLite: its folder is writable)

It sits above the backends, workflows and tracking (it asks each of them) and below the tasks.
"""

from __future__ import annotations

from collections.abc import Callable

from backends.errors import ConfigError
from preflight.data import check_tasksets
from preflight.disk import check_checkpoint_root_dir
from preflight.errors import PreflightError
from preflight.model import check_chat_template, check_model_path
from preflight.services import check_cluster, check_tracking_uri
from schemas import ExperimentConfig

# The checks in the order they run: compute first (a GPU recipe on a CPU machine says so first).
CHECKS: tuple[Callable[[ExperimentConfig], list[str]], ...] = (
    check_cluster, check_model_path, check_chat_template, check_tasksets, check_checkpoint_root_dir, check_tracking_uri,
)


def preflight(config: ExperimentConfig) -> list[str]:
    """Run every check; returns their lines, or raises PreflightError listing every problem."""
    lines: list[str] = []
    problems: list[ConfigError] = []
    for check in CHECKS:
        try:
            lines += check(config)
        except PreflightError as err:
            problems += err.problems
        except ConfigError as err:
            problems.append(err)
    if problems:
        raise PreflightError(problems)
    return lines


__all__ = ["CHECKS", "PreflightError", "check_chat_template", "check_checkpoint_root_dir", "check_cluster", "check_model_path",
           "check_tasksets", "check_tracking_uri", "preflight"]
