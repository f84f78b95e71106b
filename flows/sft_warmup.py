"""SFT warm-up stage: supervised steps on (prompt, response) rows before RL (Trinity's sft_warmup); and the
stage of every algorithm that learns from a dataset: DPO steps on preference pairs run the same way.

With eval tasksets (`buffer.explorer_input.eval_tasksets` of the stage) it evaluates the model before its
first step and after its last, as an RL stage does: the run's "before training" is then the base model,
and what the warm-up taught is a number of its own, apart from what RL adds after it. Each step's usage
goes to the ledger, and the stage stops at the budget after a step, checkpointed (tracking/usage.py)."""

from __future__ import annotations

import math
import time
from typing import Any

from prefect import flow

import tracking
from algorithms import is_preference_loss
from buffer.taskset import load_taskset
from checkpointing.layout import experiment_dir
from flows.stage import evaluate_and_log, evaluate_baseline, finish_step, finished_summary, stage_session
from flows.sync import sync
from schemas import ExperimentConfig
from tasks.dpo import dpo_step
from tasks.sft import sft_dataset, sft_step
from tracking.usage import Ledger


@flow(name="sft_warmup", log_prints=False)
def sft_warmup(config: ExperimentConfig, model_name: str) -> dict[str, Any]:
    """Train with the stage's loss (sft; dpo on preference pairs) on `buffer.trainer_input.experience_buffer`
    for `buffer.total_steps` steps (or `total_epochs` over it); the final model is where the next stage starts."""
    total_steps = config.buffer.total_steps or math.ceil(
        len(load_taskset(sft_dataset(config))) * config.buffer.total_epochs / config.buffer.train_batch_size  # type: ignore[arg-type]
    )
    if summary := finished_summary(config, total_steps):
        return summary
    step_task = dpo_step if is_preference_loss(config.algorithm.policy_loss_fn) else sft_step  # a row: a pair, or one
    with stage_session(config, total_steps, model_name) as stage:  # engines too when it evaluates (the schedule)
        # eval tasksets need the engines (the schedule starts them); held-out pairs only the trainer
        evaluates = stage.schedule.explores or config.buffer.trainer_input.eval_pairs is not None
        if evaluates and not stage.done and config.explorer.eval_on_startup:
            evaluate_baseline(config, stage.run_id)
        ledger = Ledger(experiment_dir(config), stage.done)
        for step in range(stage.done + 1, total_steps + 1):
            started = time.perf_counter()
            metrics = step_task(config, step, stage.model_dir)
            stop = finish_step(config, stage.run, ledger, step, total_steps, stage.model_dir, metrics,
                               time.perf_counter() - started, stage.progress)
            if stop is not None:  # checkpointed; a resume goes on from this step
                stage.stopped = ledger.stopped(step, stop)
                break
        if evaluates and stage.stopped is None:
            if stage.schedule.explores:  # the engines get the trained weights once, for the evaluation after the warm-up
                sync(config, total_steps)
            stage.evals, metrics = evaluate_and_log(config, stage.run_id, total_steps)
            tracking.log_metrics(config, stage.run_id, metrics, total_steps)
    return stage.summary
