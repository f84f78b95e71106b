"""Tracking: MLflow (default), TensorBoard, Weights & Biases or none (`monitor.monitor_type`).

MLflow: one parent run per experiment (role "experiment", named after it), and nested below it one run
per stage and side (role main: a stage, or its trainer side; explorer: an explore-only deployment;
bench), so a multi-stage pipeline reads as one thing in the UI. A run that resumes continues its run
(not a duplicate). Tags: the experiment folder, the role, the Prefect flow run, `group`.
TensorBoard writes event files under {experiment_dir}/log/tensorboard/<role>; W&B logs offline into
{experiment_dir}/log/wandb unless WANDB_MODE or WANDB_API_KEY says otherwise; none logs nothing.

Every wait on the tracking server is bounded (MLflow's defaults retry for minutes), and an outage in
the middle of a run never fails it: writes are kept in the experiment's `log/mlflow_spool.jsonl` and
replayed, in order, as soon as the server answers again (see `TrackingClient`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from prefect import task
from prefect.cache_policies import NO_CACHE

from backends.errors import is_transient
from checkpointing import layout
from schemas import ExperimentConfig
from schemas.experiment import STAGE_CHAIN
from tasks.failures import transient_only
from tasks.runtime import experiment_dir, read_json, write_json_atomic

EXPERIMENT_TAG = "rft.experiment_dir"
ROLE_TAG = "rft.role"  # main (a whole run, or its trainer side), explorer (an explore-only deployment), bench
PARENT_ROLE = "experiment"  # the parent run of an experiment's stage and side runs
PARENT_TAG = "mlflow.parentRunId"  # MLflow's own: the UI nests the run below its parent
GROUP_TAG = "group"
MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value
MONITORS = ("mlflow", "tensorboard", "wandb", "none")

# Bounded waits on a tracking server: a request times out after 10 s and is retried twice (~3 s of
# backoff); MLflow's defaults are 120 s and 7 retries with a doubling backoff (minutes per call).
for _name, _value in (
    ("MLFLOW_HTTP_REQUEST_TIMEOUT", "10"),
    ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2"),
    ("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1"),
):
    os.environ.setdefault(_name, _value)
PROBE_EVERY_S = 5.0  # while the server is down, writes go straight to the spool; its /health is asked this often
SPOOL = "mlflow_spool.jsonl"
RESTARTS = "restarts.json"

logger = logging.getLogger(__name__)


def tracking_uri_and_source(config: ExperimentConfig) -> tuple[str, str]:
    """The tracking URI and the setting it comes from: monitor.tracking_uri, else $MLFLOW_TRACKING_URI,
    else SQLite beside the checkpoints (checkpoint_root_dir). Creates nothing."""
    if config.monitor.tracking_uri:
        return config.monitor.tracking_uri, "monitor.tracking_uri"
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"], "MLFLOW_TRACKING_URI"
    return f"sqlite:///{Path(config.checkpoint_root_dir).resolve() / 'mlflow.db'}", "checkpoint_root_dir"


def tracking_uri(config: ExperimentConfig) -> str:
    """config.monitor.tracking_uri, else $MLFLOW_TRACKING_URI, else SQLite beside the checkpoints."""
    uri, source = tracking_uri_and_source(config)
    if source == "checkpoint_root_dir":
        Path(config.checkpoint_root_dir).resolve().mkdir(parents=True, exist_ok=True)
    return uri


def artifact_location(config: ExperimentConfig) -> str | None:
    """Artifacts beside a SQLite store (else MLflow writes ./mlruns wherever the run started)."""
    uri = tracking_uri(config)
    if uri.startswith("sqlite:///"):
        return (Path(uri.removeprefix("sqlite:///")).parent / "mlartifacts").as_uri()
    return None


def mlflow_ui_url() -> str:
    return os.environ.get("RFT_MLFLOW_UI_URL", "http://127.0.0.1:5000")


def client_for(config: ExperimentConfig) -> TrackingClient:
    return TrackingClient(tracking_uri(config), layout.log_dir(experiment_dir(config)) / SPOOL)


# -- writes that survive an outage -------------------------------------------------------------------

_lock = threading.Lock()
_down_since: dict[str, float] = {}  # tracking URI -> when it was last found not answering


class TrackingClient:
    """An MlflowClient whose writes (`SPOOLED`) never fail a run: while the server does not answer,
    each is appended to a spool file (artifacts copied beside it) with a warning, and the spool is
    replayed in order before the next write once the server answers again. Reads pass through."""

    SPOOLED = ("log_batch", "log_metric", "set_tag", "log_table", "log_artifact", "set_terminated")

    def __init__(self, uri: str, spool: Path) -> None:
        self.uri = uri
        self.spool = spool
        self.client = MlflowClient(tracking_uri=uri)

    def __getattr__(self, name: str) -> Any:
        if name in self.SPOOLED:
            return lambda *args, **kwargs: self._write(name, args, kwargs)
        return getattr(self.client, name)

    def flush(self) -> int:
        """Replay the spool (when the server is not known to be down); returns the calls replayed."""
        with _lock:
            return self._flush()

    def _write(self, name: str, args: tuple, kwargs: dict) -> None:
        with _lock:
            if self._flush() < 0:
                self._keep(name, args, kwargs)
                return
            try:
                getattr(self.client, name)(*args, **kwargs)
            except Exception as err:
                if not is_transient(err):
                    raise
                self._went_down(err)
                self._keep(name, args, kwargs)
                return
            _down_since.pop(self.uri, None)

    def _still_down(self) -> bool:
        """Known down and not answering now (its /health asked at most every PROBE_EVERY_S, 2 s timeout)."""
        if self.uri not in _down_since:
            return False
        if time.monotonic() - _down_since[self.uri] < PROBE_EVERY_S:
            return True
        if self.uri.startswith(("http://", "https://")):
            try:
                urllib.request.urlopen(self.uri.rstrip("/") + "/health", timeout=2).close()
            except urllib.error.HTTPError as err:
                if err.code >= 500:
                    _down_since[self.uri] = time.monotonic()
                    return True
            except OSError:
                _down_since[self.uri] = time.monotonic()
                return True
        return False

    def _went_down(self, err: BaseException) -> None:
        if self.uri not in _down_since:
            _warn(f"MLflow at {self.uri} does not answer ({type(err).__name__}): its writes are kept in {self.spool} "
                  "and logged when it answers again; training goes on")
        _down_since[self.uri] = time.monotonic()

    def _keep(self, name: str, args: tuple, kwargs: dict) -> None:
        self.spool.parent.mkdir(parents=True, exist_ok=True)
        if name == "log_artifact":  # the file may be temporary: keep a copy
            source = Path(kwargs.pop("local_path", None) or args[1])
            kept = self.spool.parent / "mlflow_spool" / uuid.uuid4().hex[:8] / source.name
            kept.parent.mkdir(parents=True)
            shutil.copyfile(source, kept)
            args = (args[0], str(kept), *args[2:])
        line = {"call": name, "args": [_encode(a) for a in args], "kwargs": {k: _encode(v) for k, v in kwargs.items()}}
        with self.spool.open("a") as fh:
            fh.write(json.dumps(line) + "\n")

    def _flush(self) -> int:
        """-1: the server is still down (the spool stays); else how many kept calls were replayed."""
        if self._still_down():
            return -1
        if not self.spool.is_file():
            return 0
        lines = self.spool.read_text().splitlines()
        for i, line in enumerate(lines):
            call = json.loads(line)
            try:
                getattr(self.client, call["call"])(
                    *[_decode(a) for a in call["args"]], **{k: _decode(v) for k, v in call["kwargs"].items()}
                )
            except Exception as err:
                if is_transient(err):
                    self._went_down(err)
                    self.spool.write_text("".join(rest + "\n" for rest in lines[i:]))
                    return -1
                _warn(f"a kept MLflow call ({call['call']}) failed and is dropped: {type(err).__name__}: {err}")
        self.spool.unlink()
        shutil.rmtree(self.spool.parent / "mlflow_spool", ignore_errors=True)
        _down_since.pop(self.uri, None)
        _warn(f"MLflow at {self.uri} answers again: {len(lines)} kept call(s) logged")
        return len(lines)


def _encode(value: Any) -> Any:
    if isinstance(value, Metric):
        return {"__metric__": [value.key, value.value, value.timestamp, value.step]}
    if isinstance(value, Param):
        return {"__param__": [value.key, value.value]}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and "__metric__" in value:
        return Metric(*value["__metric__"])
    if isinstance(value, dict) and "__param__" in value:
        return Param(*value["__param__"])
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def _warn(message: str) -> None:
    try:
        from prefect import get_run_logger

        get_run_logger().warning(message)
    except Exception:  # outside a flow or task run
        logger.warning(message)


def best_effort(fn: Callable[..., Any]) -> Callable[..., Any]:
    """For what may be skipped while the server is down (the curve, the model registry): warn, return None."""

    @wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as err:
            if not is_transient(err):
                raise
            _warn(f"{fn.__name__} skipped: MLflow does not answer ({type(err).__name__})")
            return None

    return call


def count_restart(config: ExperimentConfig, part: str, count: int = 1) -> dict[str, float]:
    """Add `count` restarts of `part` ("engine" or "trainer") to the experiment's tally; logged with
    every step's metrics as `engine_restarts` / `trainer_restarts`. Returns the tally."""
    path = layout.log_dir(experiment_dir(config)) / RESTARTS
    with _lock:
        tally = restart_counts(config)
        tally[f"{part}_restarts"] = tally.get(f"{part}_restarts", 0.0) + count
        write_json_atomic(path, tally)
    return tally


def restart_counts(config: ExperimentConfig) -> dict[str, float]:
    saved = read_json(layout.log_dir(experiment_dir(config)) / RESTARTS, {})
    return {"engine_restarts": 0.0, "trainer_restarts": 0.0, **saved}


def flatten(data: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(data, dict):
        out: dict[str, str] = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): str(data)[:MAX_PARAM_CHARS]}


def experiment_root(config: ExperimentConfig) -> tuple[str, Path]:
    """The whole experiment a stage belongs to: its name and folder (a config without stages: itself)."""
    name = config.name
    if str(config.derived.get("name", "")).startswith(STAGE_CHAIN):
        name = name.rsplit("/", 1)[0]
    return name, (Path(config.checkpoint_root_dir) / config.project / name).resolve()


def _run_filter(folder: Path | str, role: str) -> str:
    return f"tags.`{EXPERIMENT_TAG}` = '{folder}' and tags.`{ROLE_TAG}` = '{role}'"


def _experiment_id(client: MlflowClient, config: ExperimentConfig) -> str:
    name = config.monitor.experiment_name or config.project
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    # MLflow 3's UI opens an experiment of this kind on its runs table (not the GenAI traces overview)
    return client.create_experiment(name, artifact_location=artifact_location(config),
                                    tags={"mlflow.experimentKind": "custom_model_development"})


def _parent_run(client: MlflowClient, config: ExperimentConfig, experiment_id: str, flow_run_id: str) -> str:
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


def _settle_parent(client: MlflowClient, run_id: str) -> None:
    """The parent's status follows its nested runs: running while one runs, else failed if one failed."""
    parent = client.get_run(run_id).data.tags.get(PARENT_TAG)
    if not parent:
        return
    run = client.get_run(parent)
    children = client.search_runs([run.info.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{parent}'")
    statuses = {child.info.status for child in children}
    if "RUNNING" in statuses:
        return
    status = "FAILED" if statuses & {"FAILED", "KILLED"} else "FINISHED"
    if run.info.status != status:
        client.set_terminated(parent, status=status)


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
    params = flatten(config.model_dump(mode="json", exclude={"stages", "warnings"}))
    params["warnings"] = (" | ".join(config.warnings) or "none")[:MAX_PARAM_CHARS]
    return params


@task(name="start-mlflow-run", retries=2, retry_delay_seconds=3, retry_condition_fn=transient_only, cache_policy=NO_CACHE)
def start_mlflow_run(config: ExperimentConfig, flow_run_id: str, role: str = "main") -> dict[str, str]:
    """The experiment's run of `role` in `monitor.monitor_type`: with MLflow the unfinished one of an
    earlier attempt, or a new one, nested below the experiment's parent run."""
    monitor = config.monitor.monitor_type
    if monitor != "mlflow":
        return _start_other(config, monitor, role)
    client = client_for(config)
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
        "tracking_uri": tracking_uri(config),
        "url": f"{mlflow_ui_url()}/#/experiments/{experiment_id}/runs/{run_id}",
        "parent_run_id": parent,
    }


# ----------------------------------------------------------------------------- TensorBoard, W&B, none
# A run of another monitor is named "<monitor>|<role>|<experiment folder>"; its writer lives in this process.
_WRITERS: dict[str, Any] = {}
_WRITERS_LOCK = threading.Lock()


def _other_id(monitor: str, role: str, folder: Path) -> str:
    return f"{monitor}|{role}|{folder}"


def _parse_other(run_id: str) -> tuple[str, str, Path] | None:
    parts = run_id.split("|", 2)
    return (parts[0], parts[1], Path(parts[2])) if len(parts) == 3 and parts[0] in MONITORS else None


def _start_other(config: ExperimentConfig, monitor: str, role: str) -> dict[str, str]:
    folder = experiment_dir(config)
    run_id = _other_id(monitor, role, folder)
    where = ""
    if monitor == "tensorboard":
        where = str(_writer(run_id, config).log_dir)
    elif monitor == "wandb":
        where = str(_writer(run_id, config).dir)
    return {"run_id": run_id, "experiment_id": "", "tracking_uri": monitor, "url": where, "parent_run_id": ""}


def _writer(run_id: str, config: ExperimentConfig | None = None) -> Any:
    """The open TensorBoard SummaryWriter or W&B run of `run_id` (opened on first use)."""
    monitor, role, folder = _parse_other(run_id)  # type: ignore[misc]
    with _WRITERS_LOCK:
        if run_id in _WRITERS:
            return _WRITERS[run_id]
        logs = layout.log_dir(folder)
        if monitor == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter

            writer: Any = SummaryWriter(log_dir=str(logs / "tensorboard" / role))
        else:
            writer = _wandb_run(config, role, folder, logs)
        _WRITERS[run_id] = writer
        return writer


def _wandb_run(config: ExperimentConfig | None, role: str, folder: Path, logs: Path) -> Any:
    import wandb

    if config is None:
        raise RuntimeError(f"no W&B run is open for {folder} ({role}) in this process")
    # Offline unless the environment asks for more: no network call without a key.
    mode = os.environ.get("WANDB_MODE") or ("online" if os.environ.get("WANDB_API_KEY") else "offline")
    logs.mkdir(parents=True, exist_ok=True)
    import hashlib

    slug = "".join(c if c.isalnum() else "-" for c in f"{config.project}-{config.name}-{role}")
    run_id = f"{slug[:40]}-{hashlib.sha1(str(folder).encode()).hexdigest()[:10]}"  # W&B ids are short
    run = wandb.init(
        project=config.monitor.experiment_name or config.project, name=config.name if role == "main" else f"{config.name} ({role})",
        group=config.group or experiment_root(config)[0], id=run_id, resume="allow", dir=str(logs), mode=mode,
        config=config.model_dump(mode="json", exclude={"stages"}), reinit="create_new",
    )
    run.define_metric("global_step")
    run.define_metric("*", step_metric="global_step")
    return run


def _close_other(run_id: str, failed: bool = False) -> None:
    with _WRITERS_LOCK:
        writer = _WRITERS.pop(run_id, None)
    if writer is None:
        return
    monitor = _parse_other(run_id)[0]  # type: ignore[index]
    if monitor == "tensorboard":
        writer.close()
    else:
        writer.finish(exit_code=1 if failed else 0)


def log_metrics(config: ExperimentConfig, run_id: str, metrics: dict[str, float], step: int) -> None:
    """The step's metrics, and the tally of revived engines and trainers so far."""
    metrics = {**metrics, **restart_counts(config)}
    if config.monitor.monitor_type != "mlflow":
        if config.monitor.monitor_type in ("tensorboard", "wandb"):
            writer = _writer(run_id, config)
            if config.monitor.monitor_type == "tensorboard":
                for key, value in metrics.items():
                    writer.add_scalar(key, float(value), step)
                writer.flush()
            else:
                writer.log({**{k: float(v) for k, v in metrics.items()}, "global_step": step})
        return

    now = int(time.time() * 1000)
    rows = [Metric(key.replace("@", "_at_"), float(value), now, step) for key, value in metrics.items()]
    client = client_for(config)
    for i in range(0, len(rows), 500):
        client.log_batch(run_id, metrics=rows[i : i + 500])


def log_eval_table(config: ExperimentConfig, run_id: str, name: str, rows: list[dict], step: int) -> None:
    if config.monitor.monitor_type == "tensorboard":
        columns = list(rows[0]) if rows else []
        table = "\n".join(["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
                          + ["| " + " | ".join(str(row[c]).replace("|", "/").replace("\n", " ") for c in columns) + " |"
                             for row in rows])
        _writer(run_id, config).add_text(f"eval/{name}", table, step)
        return
    if config.monitor.monitor_type == "wandb":
        import wandb

        columns = list(rows[0]) if rows else []
        _writer(run_id, config).log({f"eval/{name}/table": wandb.Table(columns=columns, data=[[row[c] for c in columns] for row in rows]),
                                     "global_step": step})
        return
    if config.monitor.monitor_type != "mlflow":
        return
    client = client_for(config)
    columns = {key: [row[key] for row in rows] for key in (rows[0] if rows else {})}
    client.log_table(run_id, data=columns, artifact_file=f"eval/{name}/step_{step:05d}.json")


TRAIN_CURVES = (("explore/reward_mean", "train reward", "tab:blue"), ("explore/strict", "train strict", "tab:green"),
                ("explore/format", "train format", "tab:orange"))
SFT_CURVES = (("train/loss", "SFT loss (response tokens)", "tab:red"),)  # a warm-up stage has no rewards
EVAL_CURVES = (("strict", "tab:green"), ("lenient", "tab:purple"), ("format", "tab:orange"))
TASKSET_STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"))


def _train_curves(config: ExperimentConfig) -> tuple[tuple[str, str, str], ...]:
    return SFT_CURVES if config.algorithm.algorithm_type == "sft" else TRAIN_CURVES


def curve_rows(config: ExperimentConfig, run_id: str) -> list[dict[str, Any]]:
    """The curve's points as table rows, one per step: the training samples' reward / strict / format (an SFT
    stage: its loss) and, at evaluation steps, each eval taskset's strict / lenient / format (MLflow only)."""
    if config.monitor.monitor_type != "mlflow":
        return []
    client = client_for(config)
    metrics = client.get_run(run_id).data.metrics
    eval_keys = sorted(k for k in metrics if k.startswith("eval/") and k.rsplit("/", 1)[-1] in dict(EVAL_CURVES))
    rows: dict[int, dict[str, Any]] = {}
    for key in [k for k, _, _ in _train_curves(config)] + eval_keys:
        for point in client.get_metric_history(run_id, key):
            rows.setdefault(point.step, {"step": point.step})[key] = round(point.value, 4)
    columns = ["step", *(k for k, _, _ in _train_curves(config) if k in metrics), *eval_keys]
    return [{c: rows[step].get(c, "") for c in columns} for step in sorted(rows)]


@best_effort
def log_reward_curve(config: ExperimentConfig, run_id: str, file_name: str = "reward_curve.png") -> Path | None:
    """A PNG of the run, logged as an artifact: training reward per step above, and below every eval
    taskset's strict / lenient accuracy and format rate at each evaluation (step 0: before training).
    MLflow only: TensorBoard and W&B draw their own curves; none: nothing."""
    if config.monitor.monitor_type != "mlflow":
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    client = client_for(config)

    def history(key: str) -> tuple[list[int], list[float]]:
        points = sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)
        return [m.step for m in points], [m.value for m in points]

    fig, (train_ax, eval_ax) = plt.subplots(2, 1, figsize=(7, 6.5), sharex=True)
    for key, label, color in _train_curves(config):
        steps, values = history(key)
        if not steps:
            continue
        window = max(1, min(10, len(values) // 5))
        smooth = [sum(values[max(0, i - window + 1) : i + 1]) / (i + 1 - max(0, i - window + 1)) for i in range(len(values))]
        if key == "explore/reward_mean":
            train_ax.plot(steps, values, color=color, alpha=0.3, marker=".", label=f"{label} (each step)")
        train_ax.plot(steps, smooth, color=color, label=f"{label}" + (f" (mean of {window} steps)" if window > 1 else ""))
    train_ax.set_ylabel("SFT rows: loss" if config.algorithm.algorithm_type == "sft" else "training samples")
    train_ax.set_title(f"{config.project}/{config.name}")
    train_ax.grid(alpha=0.3)
    if train_ax.get_lines():
        train_ax.legend(loc="upper left", fontsize=8)

    metrics = client.get_run(run_id).data.metrics
    tasksets = sorted({k.split("/")[1] for k in metrics if k.startswith("eval/") and k.count("/") == 2})
    for i, name in enumerate(tasksets):
        style, marker = TASKSET_STYLES[i % len(TASKSET_STYLES)]
        for metric, color in EVAL_CURVES:
            steps, values = history(f"eval/{name}/{metric}")
            if steps:
                eval_ax.plot(steps, values, linestyle=style, marker=marker, color=color, label=f"{name} {metric}")
    eval_ax.set_ylim(-0.02, 1.02)
    eval_ax.set_xlabel("step (0: before training)")
    eval_ax.set_ylabel("held-out share")
    eval_ax.grid(alpha=0.3)
    if eval_ax.get_lines():
        eval_ax.legend(loc="best", fontsize=8)
    out = layout.log_dir(experiment_dir(config)) / file_name
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    client.log_artifact(run_id, str(out))
    return out


def log_checkpoint(config: ExperimentConfig, run_id: str, step: int, path: str) -> None:
    if config.monitor.monitor_type != "mlflow":
        return
    client = client_for(config)
    client.set_tag(run_id, f"checkpoint.global_step_{step}", path)
    client.log_metric(run_id, "checkpoint/global_step", float(step), step=step)


@best_effort
def register_model(config: ExperimentConfig, run_id: str, name: str, model_dir: str) -> str | None:
    """A new version of registered model `name` pointing at the converted folder (no copy); MLflow only."""
    if config.monitor.monitor_type != "mlflow":
        return None
    client = client_for(config)
    try:
        client.get_registered_model(name)
    except Exception:  # MlflowException(RESOURCE_DOES_NOT_EXIST)
        client.create_registered_model(name, description="RFT-trained models (rft flow)")
    client.set_tag(run_id, "rft.final_model", model_dir)
    try:
        version = client.create_model_version(name, source=Path(model_dir).resolve().as_uri(), run_id=run_id)
    except MlflowException as err:
        if "Invalid model version source" not in str(err):
            raise
        # A tracking server registers only what is in its artifact store: the folder stays where it is.
        _warn(f"model {name!r} not registered: the tracking server at {client.uri} does not register a local "
              f"folder; the final model is {model_dir} (the run's tag rft.final_model)")
        return None
    return version.version


@best_effort
def tag_remote_model(config: ExperimentConfig, run_id: str, sampler_path: str, state_path: str) -> None:
    """The final weights of a Tinker run are on the Tinker server: their paths, instead of a model version."""
    if config.monitor.monitor_type != "mlflow":
        return
    client = client_for(config)
    client.set_tag(run_id, "rft.final_model", sampler_path)
    client.set_tag(run_id, "rft.final_state", state_path)


@best_effort
def fail_open_run(config: ExperimentConfig, role: str = "main") -> None:
    """Mark the experiment's running run of `role` FAILED (a retry continues it, see start_mlflow_run)."""
    if config.monitor.monitor_type != "mlflow":
        _close_other(_other_id(config.monitor.monitor_type, role, experiment_dir(config)), failed=True)
        return
    uri, source = tracking_uri_and_source(config)
    if source == "checkpoint_root_dir" and not Path(uri.removeprefix("sqlite:///")).exists():
        return  # nothing was logged yet (a run that stopped at its pre-flight): nothing to fail, nothing created
    client = client_for(config)
    experiment = client.get_experiment_by_name(config.monitor.experiment_name or config.project)
    if experiment is None:
        return
    runs = client.search_runs([experiment.experiment_id], filter_string=_run_filter(experiment_dir(config), role))
    for run in runs:
        if run.info.status == "RUNNING":
            client.set_terminated(run.info.run_id, status="FAILED")
            _settle_parent(client, run.info.run_id)


def finish_run(config: ExperimentConfig, run_id: str, status: str = "FINISHED") -> None:
    if config.monitor.monitor_type != "mlflow":
        _close_other(run_id, failed=status != "FINISHED")
        return
    client = client_for(config)
    client.set_terminated(run_id, status=status)  # kept, if the server is down, and logged when it is back
    best_effort(_settle_parent)(client, run_id)
