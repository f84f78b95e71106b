"""Mode `both`: explore, train and sync the experiment's policy — in turns, or overlapped.

Read it as the stage: bring up the model, the MLflow run, the engines and the trainer; resume from the
latest checkpoint; evaluate the untrained model. Then, with `sync_offset: 0` and `sync_style: fixed`,
take turns every step (explore → train → sync, evaluate now and then); otherwise run the explorer and
the trainer flows side by side, meeting only at the buffer and at published weight versions (explore
of step N+1 overlaps training of step N). Finally save the trained model and draw the curve.
"""

from __future__ import annotations

import time
from typing import Any

from prefect import get_run_logger

from checkpointing.layout import experiment_dir
from flows.concurrent import side_by_side
from flows.explore import explore
from flows.explorer import explorer
from flows.recovery import retrain_after_trainer_death
from flows.stage import (
    checkpoint_if_due,
    close_stage,
    evaluate_and_log,
    evaluate_baseline,
    exclusive,
    finished_summary,
    open_mlflow_run,
    planned_steps,
    stage_flows_without_heartbeats,
    stop_stage,
)
from flows.sync import sync
from flows.train import train
from flows.trainer import trainer
from schemas import ExperimentConfig
from tasks.checkpoint import restore_checkpoint
from tasks.setup import prepare_model, start_rollout_engines, start_trainer
import tracking
from tracking.progress import StepProgress
from tracking.usage import Ledger, over_budget


def rl(config: ExperimentConfig, model_name: str) -> dict[str, Any]:
    """Run (or resume) a mode-`both` stage to `planned_steps`; returns its summary."""
    total_steps = planned_steps(config)
    if summary := finished_summary(config, total_steps):
        return summary
    with exclusive(config), stage_flows_without_heartbeats():
        model_dir = prepare_model(config)
        run = open_mlflow_run(config)
        start_rollout_engines(config, model_dir)
        start_trainer(config, model_dir, total_steps)
        done = restore_checkpoint(config)  # 0 on a fresh start; disk is the source of truth
        if done:
            sync(config, done)  # the engines serve the restored weights
        progress = StepProgress(total_steps, f"{config.project}/{config.name}", done=done, folder=experiment_dir(config))
        if not done and config.explorer.eval_on_startup:  # the model before training: the baseline
            evaluate_baseline(config, run["run_id"])
        if takes_turns(config):
            evals, stopped = take_turns(config, run, done, total_steps, model_dir, progress)
            if stopped is not None:  # a budget: checkpointed at that step, resumable
                step, reason, usage = stopped
                return stop_stage(config, run, step, total_steps, reason, usage)
        else:
            _, explored = side_by_side(
                lambda: trainer(config, total_steps, run, model_dir, done, str(progress.artifact)),
                lambda: explorer(config, total_steps, run["run_id"], serving=done),
            )
            evals = explored["evals"]
        return close_stage(config, run, total_steps, model_dir, model_name, evals)


def takes_turns(config: ExperimentConfig) -> bool:
    """Strictly on-policy: each step's rollouts come from the weights the previous step trained."""
    sync_config = config.synchronizer
    return sync_config.sync_offset == 0 and sync_config.sync_style == "fixed"


Stopped = tuple[int, str, dict[str, float]]  # the step a budget stopped after, why, the usage so far


def take_turns(
    config: ExperimentConfig, run: dict[str, str], done: int, total_steps: int, model_dir: str, progress: StepProgress
) -> tuple[list[dict], Stopped | None]:
    """Every step: explore a batch, train on it, sync the engines; evaluate every eval_interval steps.
    Stops early, checkpointed, when the usage so far reaches the budget."""
    evals: list[dict] = []
    ledger = Ledger(experiment_dir(config), done)
    for step in range(done + 1, total_steps + 1):
        started = time.perf_counter()
        metrics = explore(config, step)
        sync_now = step % config.synchronizer.sync_interval == 0 or step == total_steps
        try:
            metrics |= train(config, step)
            if sync_now:
                metrics |= sync(config, step)
        except Exception as error:  # a dead trainer is restarted and the lost steps trained again
            metrics |= retrain_after_trainer_death(config, step, model_dir, total_steps, error, sync_now)
        metrics["time/step_s"] = sum(metrics.get(k, 0.0) for k in ("time/explore_s", "time/train_s", "time/sync_s"))
        metrics["time/step_wall_s"] = time.perf_counter() - started  # with Prefect's own overhead
        if step % config.explorer.eval_interval == 0 or step == total_steps:
            eval_started = time.perf_counter()
            evals, eval_metrics = evaluate_and_log(config, run["run_id"], step)
            metrics |= eval_metrics | {"time/eval_s": time.perf_counter() - eval_started}
        metrics |= ledger.add(step, metrics, time.perf_counter() - started)
        stop = over_budget(config.budget, ledger.totals()) if step < total_steps else None
        tracking.log_metrics(config, run["run_id"], metrics, step)
        checkpoint_if_due(config, run, step, total_steps, model_dir, now=stop is not None)
        progress.update(step, metrics)
        get_run_logger().info(
            "step %d/%d: reward %.3f, %.1f s", step, total_steps, metrics.get("explore/reward_mean", 0.0), metrics["time/step_s"]
        )
        if stop is not None:
            return evals, (step, stop, ledger.totals())
    return evals, None
