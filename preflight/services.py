"""Services a run talks to: the compute (the policy's cluster or service), MLflow, the Hugging Face hub;
and the bounded probes that ask whether they answer (seconds, never minutes)."""

from __future__ import annotations

import os
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from backends.errors import ConfigError
from backends.policy import policy_for
from preflight.disk import writable_ancestor
from schemas import ExperimentConfig
from schemas.secrets import redact, without_credentials
from tracking.store import tracking_uri_and_source

PROBE_TIMEOUT_S = 3.0  # one attempt to reach a service
PROBE_ATTEMPTS = 2
HF_HUB = os.environ.get("HF_ENDPOINT", "https://huggingface.co")


def check_cluster(config: ExperimentConfig) -> list[str]:
    """`cluster.ray_address` (or the policy's service) answers; nothing is started."""
    try:
        policy = policy_for(config)
    except NotImplementedError as err:  # a backend that is not built yet
        raise ConfigError("explorer.rollout_model.engine_type", str(err)) from None
    return policy.preflight()


def check_tracking_uri(config: ExperimentConfig) -> list[str]:
    """MLflow's tracking URI (monitor.tracking_uri, $MLFLOW_TRACKING_URI or SQLite beside the
    checkpoints): a server answers within seconds; a SQLite or file store's folder is writable."""
    uri, field = tracking_uri_and_source(config)
    scheme = urlparse(uri).scheme
    if scheme in ("http", "https"):
        reason = http_answers(without_credentials(uri).rstrip("/") + "/health")
        if reason:
            raise ConfigError(
                field, f"{redact(uri)}: the MLflow server does not answer ({reason}; {PROBE_ATTEMPTS} attempts, "
                f"{PROBE_TIMEOUT_S:.0f} s each). Start it, or unset {field} to log into SQLite beside the checkpoints"
            )
        return [f"MLflow ({field}): the server at {redact(uri)} answers"]
    if scheme == "sqlite":
        path = Path(uri.removeprefix("sqlite:///").removeprefix("sqlite://"))
        writable_ancestor(field, path.parent)
        return [f"MLflow ({field}): {redact(uri)} (its folder is writable)"]
    if scheme in ("", "file"):
        writable_ancestor(field, Path(urlparse(uri).path if scheme else uri))
        return [f"MLflow ({field}): {redact(uri)} (writable)"]
    return [f"MLflow ({field}): {redact(uri)} (not checked: {scheme} stores are checked by the run's first call)"]


def hub_unreachable() -> str | None:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return "HF_HUB_OFFLINE is set"
    url = urlparse(HF_HUB)
    return tcp_unreachable(url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80))


def http_answers(url: str) -> str | None:
    """None when an HTTP server answers at `url` (any status below 500); else why not."""
    reason = "?"
    for attempt in range(PROBE_ATTEMPTS):
        try:
            with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S):
                return None
        except urllib.error.HTTPError as err:
            if err.code < 500:
                return None
            reason = f"HTTP {err.code}"
        except (urllib.error.URLError, OSError) as err:
            reason = str(getattr(err, "reason", err))
        if attempt + 1 < PROBE_ATTEMPTS:
            time.sleep(1.0)
    return reason


def tcp_unreachable(host: str, port: int) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
            return None
    except OSError as err:
        return f"{host}:{port}: {err.strerror or err}"
