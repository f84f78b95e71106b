"""Mode `both`: explore, train and sync the experiment's policy — in turns, or overlapped.

Read it as the stage: the stage session (flows/stage.py) brings up the model, the tracking run, the
engines and the trainer and resumes from the latest checkpoint; evaluate the untrained model. Then,
when the schedule takes turns (backends/schedule.py), take turns every step (explore → train → sync,
evaluate now and then); otherwise run the explorer and the trainer flows side by side, meeting only at
the buffer and at published weight versions (explore of step N+1 overlaps training of step N). Either
way the usage ledger stops the stage at the budget, after a step, checkpointed (tracking/usage.py). The
session's close saves the trained model and draws the curve.
"""

from __future__ import annotations

import time
from typing import Any

from prefect import get_run_logger

from backends.schedule import Schedule
from checkpointing.layout import experiment_dir
from flows.concurrent import side_by_side
from flows.explore import explore
from flows.explorer import explorer
from flows.recovery import retrain_after_trainer_death
from flows.stage import (
    Stage,
    evaluate_and_log,
    evaluate_baseline,
    finish_step,
    finished_summary,
    planned_steps,
    stage_session,
)
from flows.sync import sync
from flows.train import train
from flows.trainer import trainer
from schemas import ExperimentConfig
from tracking.usage import Ledger


def rl(config: ExperimentConfig, model_name: str) -> dict[str, Any]:
    """Run (or resume) a mode-`both` stage to `planned_steps`; returns its summary."""
    total_steps = planned_steps(config)
    if summary := finished_summary(config, total_steps):
        return summary
    with stage_session(config, total_steps, model_name) as stage:
        if stage.done:
            sync(config, stage.done)  # the engines serve the restored weights
        elif config.explorer.eval_on_startup:  # the model before training: the baseline
            evaluate_baseline(config, stage.run_id)
        if takes_turns(config):
            stage.evals = take_turns(stage)
        else:
            progress_id = str(stage.progress.artifact)
            trained, explored = side_by_side(
                lambda: trainer(config, total_steps, stage.run, stage.model_dir, stage.done, progress_id),
                lambda: explorer(config, total_steps, stage.run_id, serving=stage.done),
            )
            stage.evals, stage.stopped = explored["evals"], trained.get("stopped")  # the trainer keeps the budget
    return stage.summary


def takes_turns(config: ExperimentConfig) -> bool:
    """The schedule's answer: strictly on-policy, each step's rollouts from the weights the previous
    step trained (otherwise the sides overlap, as the resource plan assumes too)."""
    return Schedule.of(config).in_turns


def take_turns(stage: Stage) -> list[dict]:
    """Every step: explore a batch, train on it, sync the engines; evaluate every eval_interval steps.
    Stops early, checkpointed, when the usage so far reaches the budget (`stage.stopped` says where)."""
    config, run, total_steps, model_dir, progress = stage.config, stage.run, stage.total_steps, stage.model_dir, stage.progress
    evals: list[dict] = []
    schedule = stage.schedule
    ledger = Ledger(experiment_dir(config), stage.done)
    for step in range(stage.done + 1, total_steps + 1):
        started = time.perf_counter()
        metrics = explore(config, step)
        sync_now = schedule.publish_due(step, total_steps, requested=False)
        try:
            metrics |= train(config, step)
            if sync_now:
                metrics |= sync(config, step)
        except Exception as error:  # a dead trainer is restarted and the lost steps trained again
            metrics |= retrain_after_trainer_death(config, step, model_dir, total_steps, error, sync_now)
        metrics["time/step_s"] = sum(metrics.get(k, 0.0) for k in ("time/explore_s", "time/train_s", "time/sync_s"))
        metrics["time/step_wall_s"] = time.perf_counter() - started  # with Prefect's own overhead
        if schedule.eval_due(step, total_steps):
            eval_started = time.perf_counter()
            evals, eval_metrics = evaluate_and_log(config, run["run_id"], step)
            metrics |= eval_metrics | {"time/eval_s": time.perf_counter() - eval_started}
        stop = finish_step(config, run, ledger, step, total_steps, model_dir, metrics, time.perf_counter() - started, progress)
        get_run_logger().info(
            "step %d/%d: reward %.3f, %.1f s", step, total_steps, metrics.get("explore/reward_mean", 0.0), metrics["time/step_s"]
        )
        if stop is not None:
            stage.stopped = ledger.stopped(step, stop)
            return evals
    return evals
