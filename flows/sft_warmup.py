"""SFT warm-up stage: supervised steps on (prompt, response) rows before RL (Trinity's sft_warmup).

With eval tasksets (`buffer.explorer_input.eval_tasksets` of the stage) it evaluates the model before its
first step and after its last, as an RL stage does: the run's "before training" is then the base model,
and what the warm-up taught is a number of its own, apart from what RL adds after it."""

from __future__ import annotations

import math
from typing import Any

from prefect import flow

from buffer.taskset import load_taskset
from flows.stage import (
    checkpoint_if_due,
    close_stage,
    evaluate_and_log,
    evaluate_baseline,
    exclusive,
    finished_summary,
    open_mlflow_run,
    stage_flows_without_heartbeats,
)
from flows.sync import sync
from checkpointing.layout import experiment_dir
from schemas import ExperimentConfig
from tasks.checkpoint import restore_checkpoint
from tasks.setup import prepare_model, start_rollout_engines, start_trainer
from tasks.sft import sft_dataset, sft_step
import tracking
from tracking.progress import StepProgress


@flow(name="sft_warmup", log_prints=False)
def sft_warmup(config: ExperimentConfig, model_name: str) -> dict[str, Any]:
    """Train with the sft loss on `buffer.trainer_input.experience_buffer` for `buffer.total_steps`
    steps (or `total_epochs` over it); the final model is where the next stage starts."""
    total_steps = config.buffer.total_steps or math.ceil(
        len(load_taskset(sft_dataset(config))) * config.buffer.total_epochs / config.buffer.train_batch_size  # type: ignore[arg-type]
    )
    if summary := finished_summary(config, total_steps):
        return summary
    evaluates = bool(config.buffer.explorer_input.eval_tasksets)
    with exclusive(config), stage_flows_without_heartbeats():
        model_dir = prepare_model(config)
        run = open_mlflow_run(config)
        if evaluates:
            start_rollout_engines(config, model_dir)
        start_trainer(config, model_dir, total_steps)
        done = restore_checkpoint(config)
        if evaluates and not done and config.explorer.eval_on_startup:
            evaluate_baseline(config, run["run_id"])
        progress = StepProgress(total_steps, f"{config.project}/{config.name}", done=done, folder=experiment_dir(config))
        for step in range(done + 1, total_steps + 1):
            metrics = sft_step(config, step, model_dir)
            tracking.log_metrics(config, run["run_id"], metrics, step)
            checkpoint_if_due(config, run, step, total_steps, model_dir)
            progress.update(step, metrics)
        evals: list[dict] = []
        if evaluates:  # the engines get the trained weights once, for the evaluation after the warm-up
            sync(config, total_steps)
            evals, metrics = evaluate_and_log(config, run["run_id"], total_steps)
            tracking.log_metrics(config, run["run_id"], metrics, total_steps)
        return close_stage(config, run, total_steps, model_dir, model_name, evals=evals)
