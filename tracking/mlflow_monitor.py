"""MLflow (the default): one parent run per experiment, and nested below it one run per stage and side.

The parent run (role "experiment") is named after the experiment; below it a stage, or its trainer side
(role main), an explore-only deployment (explorer), or bench, so a multi-stage pipeline reads as one thing
in the UI. A run that resumes continues its run (not a duplicate). Tags: the experiment folder, the role,
the Prefect flow run, `group`. Params: the flattened config and its warnings; artifacts: the config as
JSON, evaluation tables, reward_curve.png (tracking/curves.py).

Writes go through `spool.TrackingClient`: an outage in the middle of a run never fails it.
"""

from __future__ import annotations

import tempfile
import time
from functools import cached_property
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param

from checkpointing.layout import experiment_dir
from schemas import ExperimentConfig
from schemas.secrets import redact
from tracking import compare, curves, gate, registry
from tracking.base import Monitor, Run, experiment_root
from tracking.nesting import PARENT_TAG
from tracking.spool import TrackingClient, best_effort
from tracking.store import artifact_location, client_for, mlflow_ui_url, nothing_logged_yet, tracking_uri

EXPERIMENT_TAG = "rft.experiment_dir"
ROLE_TAG = "rft.role"  # main (a whole run, or its trainer side), explorer (an explore-only deployment), bench
PARENT_ROLE = "experiment"  # the parent run of an experiment's stage and side runs
GROUP_TAG = "group"
MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value


class MlflowMonitor(Monitor):
    name = "mlflow"

    @cached_property
    def client(self) -> TrackingClient:
        """Made on first use: failing the open run of a run that logged nothing creates nothing."""
        return client_for(self.config)

    def start(self, flow_run_id: str, role: str) -> Run:
        """With MLflow the unfinished run of an earlier attempt, or a new one, nested below the parent run."""
        config, client = self.config, self.client
        client.flush()  # what an earlier attempt kept while the server was down
        experiment_id = _experiment_id(client, config)
        parent = _parent_run(client, config, experiment_id, flow_run_id)
        tag = str(experiment_dir(config))
        previous = client.search_runs(
            [experiment_id], filter_string=_run_filter(tag, role),
            order_by=["attributes.start_time DESC"], max_results=1,
        )
        if previous and previous[0].info.status != "FINISHED":
            run = previous[0]
            client.update_run(run.info.run_id, status="RUNNING")
            client.set_tag(run.info.run_id, f"prefect.flow_run_id.{flow_run_id[:8]}", flow_run_id)
            client.set_tag(run.info.run_id, PARENT_TAG, parent)
        else:
            tags = {EXPERIMENT_TAG: tag, ROLE_TAG: role, "prefect.flow_run_id": flow_run_id, PARENT_TAG: parent,
                    "rft.warnings": str(len(config.warnings))}
            if config.group:
                tags[GROUP_TAG] = config.group
            run = client.create_run(experiment_id, run_name=child_run_name(config, role), tags=tags)
            params = [Param(k, v) for k, v in run_params(config).items()]
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
            "tracking_uri": redact(tracking_uri(config)),  # shown and passed between flows: never its credentials
            "url": f"{mlflow_ui_url()}/#/experiments/{experiment_id}/runs/{run_id}",
            "parent_run_id": parent,
        }

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        rows = [Metric(key.replace("@", "_at_"), float(value), now, step) for key, value in metrics.items()]
        for i in range(0, len(rows), 500):
            self.client.log_batch(run_id, metrics=rows[i : i + 500])

    def log_table(self, run_id: str, name: str, rows: list[dict[str, Any]], step: int) -> None:
        columns = {key: [row[key] for row in rows] for key in (rows[0] if rows else {})}
        self.client.log_table(run_id, data=columns, artifact_file=f"eval/{name}/step_{step:05d}.json")

    def finish(self, run_id: str, status: str = "FINISHED") -> None:
        # Both kept, if the server is down, and replayed in order when it is back: the parent finishes then.
        self.client.set_terminated(run_id, status=status)
        self.client.settle_parent(run_id)

    @best_effort
    def fail_open(self, role: str) -> None:
        """Mark the experiment's running run of `role` FAILED (a retry continues it, see `start`)."""
        if nothing_logged_yet(self.config):
            return  # nothing to fail, and nothing is created
        client = self.client
        experiment = client.get_experiment_by_name(self.config.monitor.experiment_name or self.config.project)
        if experiment is None:
            return
        runs = client.search_runs([experiment.experiment_id], filter_string=_run_filter(experiment_dir(self.config), role))
        for run in runs:
            if run.info.status == "RUNNING":
                client.set_terminated(run.info.run_id, status="FAILED")
                client.settle_parent(run.info.run_id)

    def markdown(self, run: Run) -> str:
        return (f"MLflow run for **{self.config.project}/{self.config.name}**: [{run['run_id']}]({run['url']})\n\n"
                f"Tracking URI: `{run['tracking_uri']}`")

    def log_checkpoint(self, run_id: str, step: int, path: str) -> None:
        self.client.set_tag(run_id, f"checkpoint.global_step_{step}", path)
        self.client.log_metric(run_id, "checkpoint/global_step", float(step), step=step)

    def curve_rows(self, run_id: str) -> list[dict[str, Any]]:
        """[] while the server does not answer: a run that ends during an outage skips the table, not its end."""
        return self.read_curve_rows(run_id) or []

    @best_effort
    def read_curve_rows(self, run_id: str) -> list[dict[str, Any]]:
        return curves.rows(self.client, self.config, run_id)

    @best_effort
    def log_curve(self, run_id: str, file_name: str) -> Path | None:
        out = curves.draw(self.client, self.config, run_id, file_name)
        self.client.log_artifact(run_id, str(out))
        return out

    @best_effort
    def register_model(self, run_id: str, name: str, model_dir: str) -> str | None:
        return registry.register(self.client, run_id, name, model_dir)

    @best_effort
    def tag_remote_model(self, run_id: str, sampler_path: str, state_path: str) -> None:
        registry.tag_remote(self.client, run_id, sampler_path, state_path)

    def log_comparison(self, name: str, rows: list[dict[str, Any]], curves: dict[str, list[tuple[int, float]]],
                       curve_label: str) -> str | None:
        return compare.log(self.client, _experiment_id(self.client, self.config), name, rows, curves, curve_label)

    def promote(self, run_id: str, name: str, metric: str, value: float, heldout: str) -> dict[str, Any] | None:
        gate_config = self.config.monitor.gate
        assert gate_config is not None
        return gate.promote(self.client, run_id, name, metric, value, heldout, gate_config.margin, gate_config.alias)


# -- the runs' names, params and nesting ------------------------------------------------------------


def child_run_name(config: ExperimentConfig, role: str) -> str:
    """Below the experiment's run: a stage by its stage name, a side by its role ("sft_warmup", "rft",
    "rft (explorer)"; without stages "main", "explorer", "bench")."""
    whole, _ = experiment_root(config)
    if whole == config.name:
        return role
    stage = config.name.rsplit("/", 1)[-1]
    return stage if role == "main" else f"{stage} ({role})"


def run_params(config: ExperimentConfig) -> dict[str, str]:
    """The flattened config (stages aside: each stage is a run of its own), warnings as one param."""
    params = {k: redact(v) for k, v in flatten(config.model_dump(mode="json", exclude={"stages", "warnings"})).items()}
    params["warnings"] = (" | ".join(config.warnings) or "none")[:MAX_PARAM_CHARS]
    return params


def flatten(data: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(data, dict):
        out: dict[str, str] = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): str(data)[:MAX_PARAM_CHARS]}


def _run_filter(folder: Path | str, role: str) -> str:
    return f"tags.`{EXPERIMENT_TAG}` = '{folder}' and tags.`{ROLE_TAG}` = '{role}'"


def _experiment_id(client: TrackingClient, config: ExperimentConfig) -> str:
    name = config.monitor.experiment_name or config.project
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    # MLflow 3's UI opens an experiment of this kind on its runs table (not the GenAI traces overview)
    return client.create_experiment(name, artifact_location=artifact_location(config),
                                    tags={"mlflow.experimentKind": "custom_model_development"})


def _parent_run(client: TrackingClient, config: ExperimentConfig, experiment_id: str, flow_run_id: str) -> str:
    """The experiment's parent run: found, or created. Two processes (explore and train deployments)
    may create one at the same moment: the older is kept and the other deleted."""
    name, folder = experiment_root(config)
    query = dict(experiment_ids=[experiment_id], filter_string=_run_filter(folder, PARENT_ROLE),
                 order_by=["attributes.start_time ASC"], max_results=5)
    found = client.search_runs(**query)
    if not found:
        tags = {EXPERIMENT_TAG: str(folder), ROLE_TAG: PARENT_ROLE, "prefect.flow_run_id": flow_run_id,
                "mlflow.note.content": f"{config.project}/{name}: its stages and sides are the runs nested below."}
        if config.group:
            tags[GROUP_TAG] = config.group
        mine = client.create_run(experiment_id, run_name=name, tags=tags)
        found = client.search_runs(**query)
        if found and found[0].info.run_id != mine.info.run_id:
            client.delete_run(mine.info.run_id)
        elif not found:
            return mine.info.run_id
    parent = found[0].info.run_id
    if found[0].info.status != "RUNNING":
        client.update_run(parent, status="RUNNING")
    return parent
