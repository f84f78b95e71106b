"""Where MLflow is: the tracking URI and the setting it comes from, the artifact store, the UI's address,
and a client on it whose writes survive an outage (`spool.TrackingClient`).

Every wait on the tracking server is bounded: MLflow's defaults retry for minutes per call.
"""

from __future__ import annotations

import os
from pathlib import Path

from checkpointing import layout
from checkpointing.layout import experiment_dir
from schemas import ExperimentConfig
from tracking.spool import SPOOL, TrackingClient

# A request times out after 10 s and is retried twice (~3 s of backoff); MLflow's defaults are 120 s and
# 7 retries with a doubling backoff. Set before any client is made (MLflow reads them at each request).
for _name, _value in (
    ("MLFLOW_HTTP_REQUEST_TIMEOUT", "10"),
    ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2"),
    ("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1"),
):
    os.environ.setdefault(_name, _value)


def tracking_uri_and_source(config: ExperimentConfig) -> tuple[str, str]:
    """The tracking URI and the setting it comes from: monitor.tracking_uri, else $MLFLOW_TRACKING_URI,
    else SQLite beside the checkpoints (checkpoint_root_dir). Creates nothing."""
    if config.monitor.tracking_uri:
        return config.monitor.tracking_uri, "monitor.tracking_uri"
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"], "MLFLOW_TRACKING_URI"
    return f"sqlite:///{Path(config.checkpoint_root_dir).resolve() / 'mlflow.db'}", "checkpoint_root_dir"


def tracking_uri(config: ExperimentConfig) -> str:
    """config.monitor.tracking_uri, else $MLFLOW_TRACKING_URI, else SQLite beside the checkpoints (its
    folder created)."""
    uri, source = tracking_uri_and_source(config)
    if source == "checkpoint_root_dir":
        Path(config.checkpoint_root_dir).resolve().mkdir(parents=True, exist_ok=True)
    return uri


def nothing_logged_yet(config: ExperimentConfig) -> bool:
    """The default SQLite store does not exist yet (a run that stopped at its pre-flight logged nothing)."""
    uri, source = tracking_uri_and_source(config)
    return source == "checkpoint_root_dir" and not Path(uri.removeprefix("sqlite:///")).exists()


def artifact_location(config: ExperimentConfig) -> str | None:
    """Artifacts beside a SQLite store (else MLflow writes ./mlruns wherever the run started)."""
    uri = tracking_uri(config)
    if uri.startswith("sqlite:///"):
        return (Path(uri.removeprefix("sqlite:///")).parent / "mlartifacts").as_uri()
    return None


def mlflow_ui_url() -> str:
    return os.environ.get("RFT_MLFLOW_UI_URL", "http://127.0.0.1:5000")


def client_for(config: ExperimentConfig) -> TrackingClient:
    """A client on the experiment's tracking server, spooling into {experiment_dir}/log/."""
    return TrackingClient(tracking_uri(config), layout.log_dir(experiment_dir(config)) / SPOOL)
