"""The tracking run's start as a Prefect task: retried when the tracking server fails transiently
(everything else of tracking is plain calls into the `tracking` package, whose writes never fail a run)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

import tracking
from schemas import ExperimentConfig
from tasks.failures import transient_only


@task(name="start-mlflow-run", retries=2, retry_delay_seconds=3, retry_condition_fn=transient_only, cache_policy=NO_CACHE)
def start_mlflow_run(config: ExperimentConfig, flow_run_id: str, role: str = "main") -> tracking.Run:
    """The experiment's run of `role` in `monitor.monitor_type` (tracking.start_run)."""
    return tracking.start_run(config, flow_run_id, role)
