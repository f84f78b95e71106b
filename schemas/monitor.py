"""`monitor`: where metrics go."""

from __future__ import annotations

import importlib.util
from typing import Any, ClassVar, Literal

from pydantic import Field

from schemas.base import Entry, Section, honoured


def _wandb_missing(value: Any, config: Any) -> bool:
    return importlib.util.find_spec("wandb") is None


class GateConfig(Section):
    """A promotion gate: after the final evaluation the new model takes a registry alias only if it beats
    the alias's holder on the same held-out set by `margin` (tracking/gate.py)."""

    metric: str = Field(
        ..., pattern=r"^[^/]+/[^/]+$",
        description="'{eval taskset name}/{metric}' of the final evaluation, e.g. 'gsm8k-eval/strict'; higher is better.",
    )
    margin: float = Field(0.0, ge=0.0, description="How much higher than the holder's the new value must be (absolute).")
    registered_model: str | None = Field(
        None, description="The MLflow registered model whose alias is at stake; None: the stage's own ({project}-{name}[-{stage}])."
    )
    alias: str = Field("champion", min_length=1, description="The registry alias the new model must win.")
    on_loss: Literal["keep", "fail"] = Field(
        "keep", description="keep: the run completes and the holder keeps the alias; fail: the run fails (a regression gate)."
    )


class MonitorConfig(Section):
    """Experiment tracking."""

    SETTINGS: ClassVar[dict[str, Entry]] = {
        "monitor_type[wandb]": honoured().refuse_if(
            _wandb_missing, "'wandb' needs the wandb package (pip install wandb); it logs offline unless WANDB_API_KEY "
                            "or WANDB_MODE is set"),
        "enable_ray_timeline": honoured(note="a Chrome trace in {experiment_dir}/log/"),
        "gate": honoured(note="after the last stage").refuse_if(
            lambda v, c: v is not None and c.monitor.monitor_type != "mlflow",
            "a gate moves an MLflow registry alias: it needs monitor.monitor_type 'mlflow'"),
    }

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
    gate: GateConfig | None = Field(
        None, description="Promotion gate of the experiment's final model (its last stage); None: every model only registered."
    )
