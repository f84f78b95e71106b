"""Sync stage: the rollout engines start serving the trainer's current weights."""

from __future__ import annotations

from prefect import flow

from schemas import ExperimentConfig
from tasks.sync import sync_weights


@flow(name="sync", log_prints=False)
def sync(config: ExperimentConfig, version: int) -> dict[str, float]:
    """Export the trainer's weights and load them into every engine (`synchronizer.sync_method`)."""
    return sync_weights(config, version)
