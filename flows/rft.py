"""The `rft` flow: an experiment's stages in order; in mode `both`, explore → train → sync each step.

Read it top to bottom as the process: bring up the model, the engines and the trainer; then every
step explore a batch, train on it, and hand the new weights to the engines; evaluate every
`explorer.eval_interval` steps and at the end; finally save the trained model and draw the curve.
"""

from __future__ import annotations

import time
from typing import Any

from prefect import flow, get_run_logger
from prefect.context import FlowRunContext

from buffer.taskset import compute_total_steps, load_taskset
from flows.evaluate import evaluate
from flows.explore import explore
from flows.sft_warmup import sft_warmup
from flows.stage import (
    checkpoint_if_due,
    close_stage,
    exclusive,
    finished_summary,
    open_mlflow_run,
    save_eval_at_start,
    stage_flows_without_heartbeats,
)
from flows.sync import sync
from flows.train import train
from schemas import ExperimentConfig
from tasks import tracking
from tasks.checkpoint import restore_checkpoint
from tasks.progress import StepProgress
from tasks.setup import (
    check_requirements,
    connect,
    prepare_model,
    release,
    start_rollout_engines,
    start_trainer,
)


def _release(flow: Any, run: Any, state: Any) -> None:
    """State hook (completed, failed, crashed, cancelled): engines and trainer never outlive a run."""
    params = run.parameters or {}
    try:
        config = ExperimentConfig.model_validate(params["config"]).with_overrides(params.get("overrides") or {})
        if params.get("name_per_flow_run"):
            config = named_for_flow_run(config, run)
    except Exception:  # an invalid config never started anything
        return
    for stage in config.resolve_stages():
        release(stage)
        if not state.is_completed():
            tracking.fail_open_run(stage)


@flow(
    name="rft",
    on_completion=[_release],
    on_failure=[_release],
    on_crashed=[_release],
    on_cancellation=[_release],
)
def rft(
    config: ExperimentConfig, overrides: dict[str, Any] | None = None, name_per_flow_run: bool = False
) -> dict[str, Any]:
    """Run an experiment, or resume it from its latest checkpoint.

    Args:
        config: The whole experiment (Trinity-RFT's sections); a deployment's recipe by default.
        overrides: Single settings by dotted path on top of `config`, e.g.
            {"algorithm.optimizer.lr": 2e-6, "buffer.total_steps": 3}.
        name_per_flow_run: Make every flow run its own experiment, named
            "{name}-{flow run name}" (nightly runs); a retry of that flow run resumes it.
    """
    config = config.with_overrides(overrides or {})
    model_name = f"{config.project}-{config.name}"  # registered in MLflow; every run adds a version
    if name_per_flow_run:
        config = named_for_flow_run(config, FlowRunContext.get().flow_run)
    stages = config.resolve_stages()
    for stage in stages:
        connect(stage)
        check_requirements(stage)  # before anything starts or downloads
    outcome: dict[str, Any] = {}
    for stage in stages:
        name = f"{model_name}-{stage.name.rsplit('/', 1)[-1]}" if len(stages) > 1 else model_name
        if stage.mode == "both":
            outcome[stage.name] = explore_train_sync(stage, name)
        elif stage.mode == "train" and stage.algorithm.algorithm_type == "sft":
            outcome[stage.name] = sft_warmup(stage, name)
        else:
            raise NotImplementedError(
                f"mode: {stage.mode!r} (algorithm_type {stage.algorithm.algorithm_type!r}) is not supported yet; "
                "stages run 'both' (RL) or 'train' with algorithm sft"
            )
    return outcome


def explore_train_sync(config: ExperimentConfig, model_name: str) -> dict[str, Any]:
    """Mode `both`: every step explore a batch, train on it, sync the engines; evaluate now and then."""
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
        progress = StepProgress(total_steps, f"{config.project}/{config.name}", done=done)
        if not done and config.explorer.eval_on_startup:  # the model before training: the baseline
            baseline, metrics = evaluate_and_log(config, run["run_id"], step=0)
            tracking.log_metrics(config, run["run_id"], metrics, 0)
            save_eval_at_start(config, baseline)

        evals: list[dict] = []
        for step in range(done + 1, total_steps + 1):
            started = time.perf_counter()
            metrics = explore(config, step)
            metrics |= train(config, step)
            if step % config.synchronizer.sync_interval == 0:
                metrics |= sync(config, step)
            metrics["time/step_s"] = sum(metrics.get(k, 0.0) for k in ("time/explore_s", "time/train_s", "time/sync_s"))
            metrics["time/step_wall_s"] = time.perf_counter() - started  # with Prefect's own overhead
            if step % config.explorer.eval_interval == 0 or step == total_steps:
                evals, eval_metrics = evaluate_and_log(config, run["run_id"], step)
                metrics |= eval_metrics
            tracking.log_metrics(config, run["run_id"], metrics, step)
            checkpoint_if_due(config, run, step, total_steps, model_dir)
            progress.update(step, metrics)
            get_run_logger().info(
                "step %d/%d: reward %.3f, %.1f s", step, total_steps, metrics.get("explore/reward_mean", 0.0), metrics["time/step_s"]
            )
        return close_stage(config, run, total_steps, model_dir, model_name, evals)


def evaluate_and_log(config: ExperimentConfig, run_id: str, step: int) -> tuple[list[dict], dict[str, float]]:
    """Evaluate every eval taskset; their tables go to MLflow, their metrics are returned for the step's."""
    evals = evaluate(config, step)
    metrics: dict[str, float] = {}
    for result in evals:
        metrics |= {f"eval/{result['name']}/{k}": v for k, v in result["metrics"].items()}
        tracking.log_eval_table(config, run_id, result["name"], result["rows"], step)
    return evals, metrics


def named_for_flow_run(config: ExperimentConfig, run: Any) -> ExperimentConfig:
    """The experiment of one flow run, named after it: a retry keeps the name (and the date a retry
    is scheduled for may differ from the first attempt's, so it is not part of the name)."""
    return config.with_overrides({"name": f"{config.name}-{run.name}"})


def planned_steps(config: ExperimentConfig) -> int:
    taskset = config.buffer.explorer_input.taskset
    if config.buffer.total_steps is not None or taskset is None:
        return config.buffer.total_steps or 0
    return compute_total_steps(len(load_taskset(taskset)), config.buffer.batch_size, config.buffer.total_epochs)
