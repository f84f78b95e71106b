"""Mode `bench`: evaluate the saved checkpoints of an experiment, one curve over its steps.

The base model is evaluated first (step 0), then every `global_step_N` (converted to a Hugging Face
folder once, as `rft convert` does) is loaded into the engines and evaluated; the results go to an
MLflow run of their own (role "bench", nested under the experiment's run), a table artifact and the
curve picture.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_table_artifact

import tracking
from backends.policy import policy_for
from backends.weights import WeightsHandle
from checkpointing import layout
from checkpointing.layout import experiment_dir
from flows.stage import evaluate_and_log, stage_session
from schemas import ExperimentConfig
from tasks.convert import convert_checkpoint


@flow(name="bench", log_prints=False)
def bench(config: ExperimentConfig, steps: list[int] | None = None) -> dict[str, Any]:
    """Evaluate the base model and checkpoints `steps` (None: every saved one) on the eval tasksets."""
    saved = layout.complete_steps(experiment_dir(config))
    if not saved:
        raise FileNotFoundError(f"{experiment_dir(config)}: no global_step_N checkpoint to evaluate (mode bench)")
    wanted = saved if steps is None else [s for s in steps if s in saved]
    if steps is not None and (missing := sorted(set(steps) - set(saved))):
        raise FileNotFoundError(f"{experiment_dir(config)}: no checkpoint of steps {missing}; saved: {saved}")
    with stage_session(config, total_steps=len(wanted)) as stage:
        rows = [_evaluate(config, stage.run_id, 0)]
        for i, step in enumerate(wanted, start=1):
            converted = convert_checkpoint(str(layout.step_dir(experiment_dir(config), step)), stage.model_dir)
            policy_for(config).load(WeightsHandle(version=step, kind="folder", location=converted["model_dir"]))
            rows.append(_evaluate(config, stage.run_id, step))
            stage.progress.update(i, rows[-1])
        create_table_artifact(rows, key="bench", description=f"{config.project}/{config.name}: evaluation per checkpoint")
        curve = tracking.log_reward_curve(config, stage.run_id, file_name="bench_curve.png")
    get_run_logger().info("bench of %s/%s: %d checkpoints evaluated, curve %s", config.project, config.name, len(wanted), curve)
    return {"steps": [0, *wanted], "rows": rows, "curve": str(curve) if curve else None, "mlflow_run_id": stage.run_id}


def _evaluate(config: ExperimentConfig, run_id: str, step: int) -> dict[str, Any]:
    evals, metrics = evaluate_and_log(config, run_id, step)
    tracking.log_metrics(config, run_id, metrics, step)
    return {"step": step, **{key: round(value, 4) for key, value in metrics.items()}}
