"""The model registry (MLflow): the converted final model as a new version of a registered model (the
folder stays where it is), or, for weights that stay on a Tinker server, their paths as tags."""

from __future__ import annotations

from pathlib import Path

from mlflow.exceptions import MlflowException

from schemas.secrets import redact
from tracking.spool import TrackingClient, warn

FINAL_MODEL_TAG = "rft.final_model"
FINAL_STATE_TAG = "rft.final_state"


def register(client: TrackingClient, run_id: str, name: str, model_dir: str) -> str | None:
    """A new version of registered model `name` pointing at `model_dir` (no copy); None when the server
    registers only what is in its artifact store."""
    try:
        client.get_registered_model(name)
    except Exception:  # MlflowException(RESOURCE_DOES_NOT_EXIST)
        client.create_registered_model(name, description="RFT-trained models (rft flow)")
    client.set_tag(run_id, FINAL_MODEL_TAG, model_dir)
    try:
        version = client.create_model_version(name, source=Path(model_dir).resolve().as_uri(), run_id=run_id)
    except MlflowException as err:
        if "Invalid model version source" not in str(err):
            raise
        warn(f"model {name!r} not registered: the tracking server at {redact(client.uri)} does not register a local "
             f"folder; the final model is {model_dir} (the run's tag {FINAL_MODEL_TAG})")
        return None
    return version.version


def tag_remote(client: TrackingClient, run_id: str, sampler_path: str, state_path: str) -> None:
    """The final weights of a Tinker run are on the Tinker server: their paths, instead of a model version."""
    client.set_tag(run_id, FINAL_MODEL_TAG, sampler_path)
    client.set_tag(run_id, FINAL_STATE_TAG, state_path)
