"""The explorer side: explore steps on the engines, loading each weights version when it is due.

Used by mode `both` with overlap (beside the trainer flow, in threads of one run) and by mode
`explore` (its own deployment, beside a `train` deployment on the same experiment folder). It meets
the trainer only at the buffer (it writes each step's experiences) and at published weight versions
(it loads them; backends/schedule.py says which version each step samples with). When the trainer stops
at its budget (flows/meeting.py), the explorer stops at its next step boundary.
"""

from __future__ import annotations

import time
from typing import Any

from prefect import flow, get_run_logger

import tracking
from backends.schedule import Schedule
from buffer.experience_store import ExperienceStore
from checkpointing.layout import experiment_dir
from flows import meeting
from flows.concurrent import stop_event
from flows.explore import explore
from flows.stage import evaluate_and_log, evaluate_baseline, planned_steps, stage_session
from schemas import ExperimentConfig
from tasks.sync import load_weights, newest_published
from tracking.progress import StepProgress


def explore_stage(config: ExperimentConfig, model_name: str | None = None) -> dict[str, Any]:
    """Mode `explore`: the engines and the explorer only; a `train` run on the same experiment trains."""
    total_steps = planned_steps(config)
    with stage_session(config, total_steps) as stage:
        serving = newest_published(config)
        if serving:  # the trainer has published already: sample with its newest weights
            load_weights(config, serving)
        elif config.explorer.eval_on_startup and _Explorer(config, total_steps, stage.run_id, 0).explored() == 0:
            evaluate_baseline(config, stage.run_id)
        explored = explorer(config, total_steps, stage.run_id, serving, str(stage.progress.artifact))
        stage.evals, stage.stopped = explored["evals"], explored.get("stopped")  # stopped with its trainer
    return stage.summary


@flow(name="explorer", log_prints=False)
def explorer(
    config: ExperimentConfig, total_steps: int, run_id: str, serving: int = 0, progress_id: str | None = None
) -> dict[str, Any]:
    """Explore steps after the last one in the buffer up to `total_steps`, then load and evaluate the
    trainer's final version. `serving`: the version the engines serve now; `progress_id`: the progress
    this side shows (mode explore; beside a trainer, the trainer shows it). Returns the last evals."""
    progress = StepProgress.attach(progress_id, total_steps, f"{config.project}/{config.name}") if progress_id else None
    side = _Explorer(config, total_steps, run_id, serving)
    try:
        for step in range(side.explored() + 1, total_steps + 1):
            side.catch_up(step)
            side.wait_for_room(step)
            if side.halted():  # between steps: what it explored stays in the buffer for the resume
                raise _TrainerStopped
            metrics = explore(config, step)
            tracking.log_metrics(config, run_id, metrics, step)
            if progress is not None:
                progress.update(step, metrics)
        side.load(total_steps, wait=True)  # finish with the trainer: its final model, evaluated
    except _TrainerStopped:
        stop = side.halted() or {}
        get_run_logger().info("the trainer stopped at its budget after step %s: the explorer stops", stop.get("after_train_step"))
        return {"evals": side.last_evals, "serving": side.serving, "stopped": {
            "step": side.explored(), "reason": stop.get("reason", "the trainer stopped"), "usage": {}}}
    return {"evals": side.last_evals, "serving": side.serving}


class _TrainerStopped(Exception):
    """The trainer stopped at a budget (flows/meeting.py): what the explorer waits for will not come."""


class _Explorer:
    """The explorer's state between steps: which version the engines serve, what was evaluated."""

    def __init__(self, config: ExperimentConfig, total_steps: int, run_id: str, serving: int) -> None:
        self.config, self.total_steps, self.run_id = config, total_steps, run_id
        self.serving = serving
        self.requested = 0  # explorer_driven: the explore step after which it last asked
        self.evaluated: set[int] = set()
        self.last_evals: list[dict] = []
        self.timeout = config.synchronizer.sync_timeout
        self.schedule = Schedule.of(config)
        self.started = time.time()  # a budget stop announced before this is a past attempt's

    def halted(self) -> dict | None:
        """The trainer's budget stop, once it announced one."""
        return meeting.stop_announced(self.config, since=self.started)

    def explored(self) -> int:
        store = ExperienceStore.for_experiment(experiment_dir(self.config))
        try:
            return max(store.max_explore_step(), 0)
        finally:
            store.close()

    def catch_up(self, step: int) -> None:
        """Before explore `step`: serve the version it must sample with (fixed), or the newest one."""
        exact = self.schedule.version_for_step(step)
        if exact is not None:
            if exact > self.serving:
                self.load(exact, wait=True)
            return
        # explorer_driven: every sync_interval steps, ask for weights newer than ours (if any can exist yet)
        if self.schedule.asks_for_weights(step, self.requested, self.serving):
            meeting.request_sync(self.config, step - 1)
            self.requested = step - 1
            self.load(None, wait=True, newer_than=self.serving)
        elif newest_published(self.config) > self.serving:  # otherwise take what is there
            self.load(newest_published(self.config), wait=False)

    def wait_for_room(self, step: int) -> None:
        """Driven styles: never sample what max_staleness would throw away, nor overfill the buffer."""
        newer_than = self.schedule.room_after(step, self.serving)
        if newer_than is not None:
            self.load(None, wait=True, newer_than=newer_than)

    def load(self, version: int | None, *, wait: bool, newer_than: int | None = None) -> None:
        """Serve `version` (None: the newest published beyond `newer_than`), waiting for the trainer to
        publish it if `wait`; evaluate it when an evaluation is due."""
        target = (lambda: newest_published(self.config) > newer_than) if version is None else (
            lambda: newest_published(self.config) >= version)
        if wait:
            meeting.wait_until(
                lambda: target() or self.halted() is not None, timeout_s=self.timeout, stop=stop_event(),
                waiting_for=f"weights version {version if version is not None else f'> {newer_than}'}",
                other_side=lambda: f"the trainer's newest published version is {newest_published(self.config)}",
            )
        if not target():
            if wait:  # the trainer stopped at its budget before publishing it
                raise _TrainerStopped
            return
        version = version if version is not None else newest_published(self.config)
        if version > self.serving:
            metrics = load_weights(self.config, version)
            tracking.log_metrics(self.config, self.run_id, metrics, version)
            self.serving = version
        if version not in self.evaluated and self.schedule.eval_due(version, self.total_steps):
            self.evaluated.add(version)
            if self.config.buffer.explorer_input.eval_tasksets:
                self.last_evals, metrics = evaluate_and_log(self.config, self.run_id, version)
                tracking.log_metrics(self.config, self.run_id, metrics, version)
                get_run_logger().info("evaluated model version %d", version)
