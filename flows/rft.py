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
from prefect.artifacts import create_markdown_artifact
from prefect.runtime import flow_run

from buffer.taskset import compute_total_steps, load_taskset
from checkpointing import layout
from checkpointing import lock as run_lock
from flows.evaluate import evaluate
from flows.explore import explore
from flows.sync import sync
from flows.train import train
from schemas import ExperimentConfig
from tasks import tracking
from tasks.progress import StepProgress
from tasks.runtime import experiment_dir, experiment_id, read_json, write_json_atomic
from tasks.checkpoint import restore_checkpoint, save_checkpoint
from tasks.convert import convert_checkpoint
from tasks.save import link_final_model
from tasks.setup import (
    check_requirements,
    connect_ray,
    prepare_model,
    release_actors,
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
        release_actors(experiment_id(stage))
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

    `overrides` sets single fields by dotted path on top of `config`, e.g.
    {"algorithm.optimizer.lr": 2e-6, "buffer.total_steps": 3}. With `name_per_flow_run` every flow run
    is its own experiment, named "{name}-{date}-{flow run name}" (nightly runs); a retry of the same
    flow run keeps the name and so resumes."""
    config = config.with_overrides(overrides or {})
    model_name = f"{config.project}-{config.name}"  # registered in MLflow; every run adds a version
    if name_per_flow_run:
        config = named_for_flow_run(config, FlowRunContext.get().flow_run)
    stages = config.resolve_stages()
    connect_ray(config)
    for stage in stages:
        check_requirements(stage)  # before anything starts or downloads
    outcome: dict[str, Any] = {}
    for stage in stages:
        if stage.mode != "both":
            raise NotImplementedError(f"mode: {stage.mode!r} stages are not supported yet (only 'both')")
        outcome[stage.name] = explore_train_sync(stage, f"{model_name}-{stage.name.rsplit('/', 1)[-1]}" if len(stages) > 1 else model_name)
    return outcome


def explore_train_sync(config: ExperimentConfig, model_name: str) -> dict[str, Any]:
    exp_dir = experiment_dir(config)
    finished = read_json(exp_dir / "summary.json")
    if finished and finished.get("steps") == planned_steps(config):
        get_run_logger().info("%s/%s is already complete: nothing to do", config.project, config.name)
        return finished
    run_lock.hold(exp_dir, owner=f"flow run {flow_run.get_id() or 'local'}")
    try:
        return _run_steps(config, model_name)
    finally:
        run_lock.release(exp_dir)


def _run_steps(config: ExperimentConfig, model_name: str) -> dict[str, Any]:
    logger = get_run_logger()
    total_steps = planned_steps(config)
    model_dir = prepare_model(config)
    run = tracking.start_mlflow_run(config, str(flow_run.get_id() or "local"))
    create_markdown_artifact(
        f"MLflow run for **{config.project}/{config.name}**: [{run['run_id']}]({run['url']})\n\n"
        f"Tracking URI: `{run['tracking_uri']}`",
        description="MLflow run",
    )
    start_rollout_engines(config, model_dir)
    start_trainer(config, model_dir, total_steps)
    done = restore_checkpoint(config)  # 0 on a fresh start; disk is the source of truth
    if done:
        sync(config, done)  # the engines serve the restored weights
    progress = StepProgress(total_steps, f"{config.project}/{config.name}", done=done)

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
            evals = evaluate(config, step)
            for result in evals:
                metrics |= {f"eval/{result['name']}/{k}": v for k, v in result["metrics"].items()}
                tracking.log_eval_table(config, run["run_id"], result["name"], result["rows"], step)
        tracking.log_metrics(config, run["run_id"], metrics, step)
        if step == total_steps or (config.trainer.save_interval and step % config.trainer.save_interval == 0):
            tracking.log_checkpoint(config, run["run_id"], step, save_checkpoint(config, step, model_dir))
        progress.update(step, metrics)
        logger.info("step %d/%d: reward %.3f, %.1f s", step, total_steps, metrics.get("explore/reward_mean", 0.0), metrics["time/step_s"])

    converted = convert_checkpoint(str(layout.step_dir(experiment_dir(config), total_steps)), model_dir)
    final_dir = link_final_model(config, total_steps)
    tracking.register_model(config, run["run_id"], model_name, converted["model_dir"])
    curve = tracking.log_reward_curve(config, run["run_id"])
    create_markdown_artifact(summary_markdown(config, evals, final_dir, run["url"]), description="Final evaluation")
    tracking.finish_run(config, run["run_id"])
    summary = {
        "steps": total_steps,
        "final_model": final_dir,
        "reward_curve": str(curve),
        "mlflow_run_id": run["run_id"],
        "mlflow_url": run["url"],
        "eval": {r["name"]: r["metrics"] for r in evals},
    }
    write_json_atomic(experiment_dir(config) / "summary.json", summary)
    return summary


def named_for_flow_run(config: ExperimentConfig, run: Any) -> ExperimentConfig:
    """The experiment of one flow run: stable across its retries (its scheduled date and name)."""
    return config.with_overrides({"name": f"{config.name}-{run.expected_start_time:%Y%m%d}-{run.name}"})


def planned_steps(config: ExperimentConfig) -> int:
    taskset = config.buffer.explorer_input.taskset
    if config.buffer.total_steps is not None or taskset is None:
        return config.buffer.total_steps or 0
    return compute_total_steps(len(load_taskset(taskset)), config.buffer.batch_size, config.buffer.total_epochs)


def summary_markdown(config: ExperimentConfig, evals: list[dict], final_dir: str, url: str) -> str:
    lines = [f"# {config.project}/{config.name}", "", f"Final model: `{final_dir}`", "", f"MLflow: [{url}]({url})", ""]
    if evals:
        keys = sorted({k for r in evals for k in r["metrics"]})
        lines += ["| taskset | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
        for r in evals:
            lines.append(f"| {r['name']} | " + " | ".join(f"{r['metrics'].get(k, float('nan')):.4f}" for k in keys) + " |")
    return "\n".join(lines)
