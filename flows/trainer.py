"""The trainer side: a train step as soon as the explorer has put that step's experiences in the buffer,
weights published on schedule (backends/schedule.py), checkpoints every trainer.save_interval steps, each
step's usage in the ledger and a clean stop at the budget (tracking/usage.py), which the explorer follows.

Used by mode `both` with overlap (beside the explorer flow) and by mode `train` (its own deployment).
"""

from __future__ import annotations

import time
from typing import Any

from prefect import flow, get_run_logger

from backends.schedule import Schedule
from buffer.experience_store import ExperienceStore
from checkpointing.layout import experiment_dir
from flows import meeting
from flows.concurrent import stop_event
from flows.recovery import retrain_after_trainer_death
from flows.stage import finish_step, finished_summary, planned_steps, stage_session
from flows.train import train
from schemas import ExperimentConfig
from tasks.sync import publish_weights
from tracking.progress import StepProgress
from tracking.usage import Ledger


def train_stage(config: ExperimentConfig, model_name: str) -> dict[str, Any]:
    """Mode `train` (RL): the trainer only, on what an `explore` run of the same experiment explores."""
    total_steps = planned_steps(config)
    if summary := finished_summary(config, total_steps):
        return summary
    with stage_session(config, total_steps, model_name) as stage:
        if stage.done:  # an explorer (re)starting now samples with the restored weights
            publish_weights(config, stage.done)
        trained = trainer(config, total_steps, stage.run, stage.model_dir, stage.done, str(stage.progress.artifact))
        stage.stopped = trained.get("stopped")
    return stage.summary


@flow(name="trainer", log_prints=False)
def trainer(
    config: ExperimentConfig, total_steps: int, run: dict[str, str], model_dir: str, done: int, progress_id: str | None = None
) -> dict[str, Any]:
    """Train steps `done`+1 .. `total_steps`, each once its explore step is in the buffer; returns the steps
    trained and, when the budget stopped it, `stopped` (after which step, why, the usage)."""
    progress = None
    if progress_id:
        progress = StepProgress.attach(progress_id, total_steps, f"{config.project}/{config.name}", folder=experiment_dir(config))
    schedule = Schedule.of(config)
    answered = meeting.latest_request(config)  # explorer_driven: requests already answered
    published = done
    ledger = Ledger(experiment_dir(config), done)
    last = time.perf_counter()
    for step in range(done + 1, total_steps + 1):
        waited = 0.0
        while not explored(config, step):  # an explorer asking for weights meanwhile gets the newest
            waited += wait_for_explore_step(config, step, until_request_after=answered if published < step - 1 else None)
            if meeting.latest_request(config) > answered and published < step - 1:
                answered = meeting.latest_request(config)
                publish_weights(config, step - 1)
                published = step - 1
        try:
            metrics = train(config, step)
        except Exception as error:  # a dead trainer is restarted and the lost steps trained again
            metrics = retrain_after_trainer_death(config, step, model_dir, total_steps, error)
        metrics |= {"time/wait_for_explorer_s": waited}
        requested = meeting.latest_request(config) > answered
        if schedule.publish_due(step, total_steps, requested):
            answered = meeting.latest_request(config)
            metrics |= publish_weights(config, step)
            published = step
        now = time.perf_counter()
        metrics["time/step_wall_s"], last = now - last, now
        # the step's usage: what the explorer sampled for it (the buffer holds it), what this side ran
        stop = finish_step(config, run, ledger, step, total_steps, model_dir, metrics, metrics["time/step_wall_s"],
                           progress, usage=explored_tokens(config, step))
        get_run_logger().info("train step %d/%d: loss %.4f, staleness %.1f, %.1f s", step, total_steps,
                              metrics.get("train/loss", float("nan")), metrics.get("train/staleness_mean", 0.0),
                              metrics["time/step_wall_s"])
        if stop is not None:  # the explorer stops too, at its next step; a resume goes on from this checkpoint
            meeting.announce_stop(config, step, stop)
            return {"steps": step, "stopped": ledger.stopped(step, stop)}
    return {"steps": total_steps}


def explored_tokens(config: ExperimentConfig, step: int) -> dict[str, float]:
    store = ExperienceStore.for_experiment(experiment_dir(config))
    try:
        return store.explored_tokens(step)
    finally:
        store.close()


def explored(config: ExperimentConfig, step: int) -> bool:
    store = ExperienceStore.for_experiment(experiment_dir(config))
    try:
        return store.max_explore_step() >= step
    finally:
        store.close()


def wait_for_explore_step(config: ExperimentConfig, step: int, until_request_after: int | None = None) -> float:
    """Seconds waited until explore step `step` is in the buffer (sync_timeout at most), or until the
    explorer asks for weights after `until_request_after` (explorer_driven)."""
    store = ExperienceStore.for_experiment(experiment_dir(config))
    asked = (lambda: meeting.latest_request(config) > until_request_after) if until_request_after is not None else (lambda: False)
    try:
        return meeting.wait_until(
            lambda: store.max_explore_step() >= step or asked(),
            timeout_s=config.synchronizer.sync_timeout,
            waiting_for=f"explore step {step}",
            other_side=lambda: f"the explorer's last finished step is {max(store.max_explore_step(), 0)}",
            stop=stop_event(),
        )
    finally:
        store.close()
