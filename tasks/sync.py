"""Sync: the engines serve the trainer's current weights, stamped with a new model version."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from backends.policy import policy_for
from schemas import ExperimentConfig


@task(name="sync-weights", retries=1, retry_delay_seconds=5, cache_policy=NO_CACHE)
def sync_weights(config: ExperimentConfig, version: int) -> dict[str, float]:
    metrics = policy_for(config).sync(version)
    get_run_logger().info("engines serve model version %d (%.1f s)", version, metrics["time/sync_s"])
    return metrics
