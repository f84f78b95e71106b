"""MLflow: one run per experiment, continued (not duplicated) when a run resumes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient
from prefect import task
from prefect.cache_policies import NO_CACHE

from checkpointing import layout
from schemas import ExperimentConfig
from tasks.runtime import experiment_dir

EXPERIMENT_TAG = "rft.experiment_dir"
ROLE_TAG = "rft.role"  # main (a whole run, or its trainer side), explorer (an explore-only deployment), bench
MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value


def tracking_uri(config: ExperimentConfig) -> str:
    """config.monitor.tracking_uri, else $MLFLOW_TRACKING_URI, else SQLite beside the checkpoints."""
    if config.monitor.tracking_uri:
        return config.monitor.tracking_uri
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    root = Path(config.checkpoint_root_dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{root / 'mlflow.db'}"


def artifact_location(config: ExperimentConfig) -> str | None:
    """Artifacts beside a SQLite store (else MLflow writes ./mlruns wherever the run started)."""
    uri = tracking_uri(config)
    if uri.startswith("sqlite:///"):
        return (Path(uri.removeprefix("sqlite:///")).parent / "mlartifacts").as_uri()
    return None


def mlflow_ui_url() -> str:
    return os.environ.get("RFT_MLFLOW_UI_URL", "http://127.0.0.1:5000")


def client_for(config: ExperimentConfig) -> MlflowClient:
    return MlflowClient(tracking_uri=tracking_uri(config))


def flatten(data: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(data, dict):
        out: dict[str, str] = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): str(data)[:MAX_PARAM_CHARS]}


@task(name="start-mlflow-run", retries=2, retry_delay_seconds=3, cache_policy=NO_CACHE)
def start_mlflow_run(config: ExperimentConfig, flow_run_id: str, role: str = "main") -> dict[str, str]:
    """The experiment's MLflow run of `role`: the unfinished one of an earlier attempt, or a new one."""
    client = client_for(config)
    name = config.monitor.experiment_name or config.project
    experiment = client.get_experiment_by_name(name)
    experiment_id = experiment.experiment_id if experiment else client.create_experiment(name, artifact_location=artifact_location(config))
    tag = str(experiment_dir(config))
    previous = client.search_runs(
        [experiment_id], filter_string=f"tags.`{EXPERIMENT_TAG}` = '{tag}' and tags.`{ROLE_TAG}` = '{role}'",
        order_by=["attributes.start_time DESC"], max_results=1,
    )
    if previous and previous[0].info.status != "FINISHED":
        run = previous[0]
        client.update_run(run.info.run_id, status="RUNNING")
        client.set_tag(run.info.run_id, f"prefect.flow_run_id.{flow_run_id[:8]}", flow_run_id)
    else:
        run = client.create_run(
            experiment_id, run_name=config.name if role == "main" else f"{config.name} ({role})",
            tags={EXPERIMENT_TAG: tag, ROLE_TAG: role, "prefect.flow_run_id": flow_run_id},
        )
        params = [Param(k, v) for k, v in flatten(config.model_dump(mode="json", exclude={"stages"})).items()]
        for i in range(0, len(params), 100):
            client.log_batch(run.info.run_id, params=params[i : i + 100])
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "config.json"
            path.write_text(config.model_dump_json(indent=2))
            client.log_artifact(run.info.run_id, str(path))
    run_id = run.info.run_id
    return {
        "run_id": run_id,
        "experiment_id": experiment_id,
        "tracking_uri": tracking_uri(config),
        "url": f"{mlflow_ui_url()}/#/experiments/{experiment_id}/runs/{run_id}",
    }


def log_metrics(config: ExperimentConfig, run_id: str, metrics: dict[str, float], step: int) -> None:
    import time

    now = int(time.time() * 1000)
    rows = [Metric(key.replace("@", "_at_"), float(value), now, step) for key, value in metrics.items()]
    client = client_for(config)
    for i in range(0, len(rows), 500):
        client.log_batch(run_id, metrics=rows[i : i + 500])


def log_eval_table(config: ExperimentConfig, run_id: str, name: str, rows: list[dict], step: int) -> None:
    client = client_for(config)
    columns = {key: [row[key] for row in rows] for key in (rows[0] if rows else {})}
    client.log_table(run_id, data=columns, artifact_file=f"eval/{name}/step_{step:05d}.json")


def log_reward_curve(config: ExperimentConfig, run_id: str, file_name: str = "reward_curve.png") -> Path:
    """A PNG of training reward (and eval accuracy) per step, logged as an artifact."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    client = client_for(config)
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label in (("explore/reward_mean", "train reward (mean)"), ("explore/accuracy", "train accuracy")):
        history = sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)
        if history:
            ax.plot([m.step for m in history], [m.value for m in history], marker="o", label=label)
    for key in sorted(k for k in client.get_run(run_id).data.metrics if k.startswith("eval/") and k.endswith("/accuracy")):
        history = sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)
        ax.plot([m.step for m in history], [m.value for m in history], marker="s", linestyle="--", label=key)
    loss = sorted(client.get_metric_history(run_id, "train/loss"), key=lambda m: m.step)
    if loss:  # on its own axis: its scale is not a reward's
        twin = ax.twinx()
        twin.plot([m.step for m in loss], [m.value for m in loss], color="gray", alpha=0.6, label="train loss")
        twin.set_ylabel("train loss")
        twin.legend(loc="lower right")
    ax.set_xlabel("step")
    ax.set_ylabel("reward / accuracy")
    ax.set_title(f"{config.project}/{config.name}")
    ax.grid(alpha=0.3)
    if ax.get_lines():
        ax.legend(loc="upper left")
    out = layout.log_dir(experiment_dir(config)) / file_name
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    client.log_artifact(run_id, str(out))
    return out


def log_checkpoint(config: ExperimentConfig, run_id: str, step: int, path: str) -> None:
    client = client_for(config)
    client.set_tag(run_id, f"checkpoint.global_step_{step}", path)
    client.log_metric(run_id, "checkpoint/global_step", float(step), step=step)


def register_model(config: ExperimentConfig, run_id: str, name: str, model_dir: str) -> str:
    """A new version of registered model `name` pointing at the converted folder (no copy)."""
    client = client_for(config)
    try:
        client.get_registered_model(name)
    except Exception:  # MlflowException(RESOURCE_DOES_NOT_EXIST)
        client.create_registered_model(name, description="RFT-trained models (rft flow)")
    version = client.create_model_version(name, source=Path(model_dir).resolve().as_uri(), run_id=run_id)
    client.set_tag(run_id, "rft.final_model", model_dir)
    return version.version


def fail_open_run(config: ExperimentConfig, role: str = "main") -> None:
    """Mark the experiment's running MLflow run of `role` FAILED (a retry continues it, see start_mlflow_run)."""
    client = client_for(config)
    experiment = client.get_experiment_by_name(config.monitor.experiment_name or config.project)
    if experiment is None:
        return
    tag = str(experiment_dir(config))
    runs = client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`{EXPERIMENT_TAG}` = '{tag}' and tags.`{ROLE_TAG}` = '{role}'"
    )
    for run in runs:
        if run.info.status == "RUNNING":
            client.set_terminated(run.info.run_id, status="FAILED")


def finish_run(config: ExperimentConfig, run_id: str, status: str = "FINISHED") -> None:
    client_for(config).set_terminated(run_id, status=status)
