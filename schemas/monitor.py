"""`monitor`: where metrics go."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from schemas.base import Section


class MonitorConfig(Section):
    """Experiment tracking."""

    monitor_type: Literal["mlflow", "tensorboard", "wandb", "none"] = Field(
        "mlflow",
        description="Metrics backend: mlflow (runs nested per experiment, the model registry, the reward curve), "
        "tensorboard (event files in {experiment_dir}/log/tensorboard), wandb (offline unless WANDB_API_KEY or "
        "WANDB_MODE is set; needs the wandb package), none.",
    )
    tracking_uri: str | None = Field(
        None,
        description="MLflow tracking URI; None: $MLFLOW_TRACKING_URI, else sqlite:///{checkpoint_root_dir}/mlflow.db.",
    )
    experiment_name: str | None = Field(None, description="MLflow experiment; None: the project (derived).")
    enable_ray_timeline: bool = Field(False, description="Also dump a Ray timeline into the experiment folder.")
