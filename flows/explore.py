"""Explore stage: the rollout engines work through one batch of tasks into the experience buffer."""

from __future__ import annotations

from prefect import flow

from schemas import ExperimentConfig
from tasks.explore import explore_step


@flow(name="explore", log_prints=False)
def explore(config: ExperimentConfig, step: int) -> dict[str, float]:
    """Sample `buffer.batch_size` tasks × `algorithm.repeat_times` rollouts, score and persist them; the
    task is retried `explorer.max_retry_times` times (dead engines are started again first)."""
    return explore_step.with_options(retries=config.explorer.max_retry_times)(config, step)
