"""Tracking: where people watch a run. One monitor per experiment, chosen from `monitor.monitor_type`:

    mlflow        MLflow (the default): runs nested per experiment, the model registry, reward_curve.png
    tensorboard   event files in {experiment_dir}/log/tensorboard/<role>
    wandb         Weights & Biases, offline into {experiment_dir}/log/wandb unless WANDB_MODE / WANDB_API_KEY
    none          nothing

The modules:

    base.py                 Monitor (what every monitor does), NoMonitor, the shared writer of TensorBoard/W&B
    mlflow_monitor.py       MlflowMonitor; tensorboard_monitor.py, wandb_monitor.py: theirs
    store.py                where MLflow is (tracking URI, artifacts, UI link), bounded waits
    spool.py                TrackingClient: MLflow writes kept while the server is down, then replayed
    nesting.py              the parent run's status follows its nested runs (a step the spool replays)
    curves.py               reward_curve.png and its rows      registry.py   the model registry
    gate.py                 the promotion gate (a registry alias)  usage.py   usage per step, the budget
    restarts.py             revived engines and trainers, logged with every step
    progress.py             the Prefect progress artifact and its listeners (`rft run`'s progress bar)

Flows call the functions below with the experiment's config; only `start-mlflow-run` is a Prefect task
(tasks/tracking.py: a retried start). Nothing outside `MONITORS` asks which monitor it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from schemas import ExperimentConfig
from tracking.base import Monitor, NoMonitor, Run
from tracking.mlflow_monitor import EXPERIMENT_TAG, GROUP_TAG, PARENT_TAG, ROLE_TAG, MlflowMonitor
from tracking.restarts import count_restart, restart_counts
from tracking.spool import DEAD_LETTER, SPOOL, dead_letter_count
from tracking.store import tracking_uri, tracking_uri_and_source
from tracking.tensorboard_monitor import TensorBoardMonitor
from tracking.wandb_monitor import WandbMonitor

# monitor.monitor_type -> its implementation (tests/test_tracking.py checks every value has one)
MONITORS: dict[str, type[Monitor]] = {
    "mlflow": MlflowMonitor,
    "tensorboard": TensorBoardMonitor,
    "wandb": WandbMonitor,
    "none": NoMonitor,
}


def monitor_for(config: ExperimentConfig) -> Monitor:
    return MONITORS[config.monitor.monitor_type](config)


def start_run(config: ExperimentConfig, flow_run_id: str, role: str = "main") -> Run:
    """The experiment's run of `role` (main, explorer, bench): an earlier attempt's unfinished one, or new."""
    return monitor_for(config).start(flow_run_id, role)


def run_markdown(config: ExperimentConfig, run: Run) -> str:
    """Where the run is, for the Prefect artifact that links it."""
    return monitor_for(config).markdown(run)


def log_metrics(config: ExperimentConfig, run_id: str, metrics: dict[str, float], step: int) -> None:
    """The step's metrics, and the tally of revived engines and trainers so far."""
    monitor_for(config).log_metrics(run_id, {**metrics, **restart_counts(config)}, step)


def log_eval_table(config: ExperimentConfig, run_id: str, name: str, rows: list[dict], step: int) -> None:
    monitor_for(config).log_table(run_id, name, rows, step)


def log_checkpoint(config: ExperimentConfig, run_id: str, step: int, path: str) -> None:
    monitor_for(config).log_checkpoint(run_id, step, path)


def curve_rows(config: ExperimentConfig, run_id: str) -> list[dict[str, Any]]:
    """The curve's points, one row per step (MLflow only: the others cannot read their metrics back)."""
    return monitor_for(config).curve_rows(run_id)


def log_reward_curve(config: ExperimentConfig, run_id: str, file_name: str = "reward_curve.png") -> Path | None:
    """reward_curve.png logged with the run (MLflow only; None while the server does not answer)."""
    return monitor_for(config).log_curve(run_id, file_name)


def register_model(config: ExperimentConfig, run_id: str, name: str, model_dir: str) -> str | None:
    """A version of registered model `name` pointing at the converted folder (MLflow only)."""
    return monitor_for(config).register_model(run_id, name, model_dir)


def tag_remote_model(config: ExperimentConfig, run_id: str, sampler_path: str, state_path: str) -> None:
    monitor_for(config).tag_remote_model(run_id, sampler_path, state_path)


def promote_model(config: ExperimentConfig, run_id: str, name: str, metric: str, value: float, heldout: str) -> dict[str, Any] | None:
    """monitor.gate: the run's registered version takes the gate's alias if it beats the holder (tracking/gate.py)."""
    return monitor_for(config).promote(run_id, name, metric, value, heldout)


def log_comparison(config: ExperimentConfig, name: str, rows: list[dict[str, Any]],
                   curves: dict[str, list[tuple[int, float]]], curve_label: str) -> str | None:
    """rft compare's parent run with a child per variant, the table and the overlaid curves (MLflow only)."""
    return monitor_for(config).log_comparison(name, rows, curves, curve_label)


def finish_run(config: ExperimentConfig, run_id: str, status: str = "FINISHED") -> None:
    monitor_for(config).finish(run_id, status)


def fail_open_run(config: ExperimentConfig, role: str = "main") -> None:
    """Mark the experiment's open run of `role` failed (a retry continues it)."""
    monitor_for(config).fail_open(role)


__all__ = [
    "DEAD_LETTER", "EXPERIMENT_TAG", "GROUP_TAG", "MONITORS", "PARENT_TAG", "ROLE_TAG", "SPOOL", "Monitor", "Run",
    "count_restart", "dead_letter_count",
    "curve_rows", "fail_open_run", "finish_run", "log_checkpoint", "log_comparison", "log_eval_table", "log_metrics",
    "log_reward_curve", "monitor_for", "promote_model", "register_model", "restart_counts", "run_markdown", "start_run",
    "tag_remote_model", "tracking_uri", "tracking_uri_and_source",
]
