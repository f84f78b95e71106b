"""Train: one optimizer step on the oldest untrained experiences of the buffer."""

from __future__ import annotations

import time

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from backends.policy import policy_for
from buffer.experience_store import ExperienceStore
from schemas import ExperimentConfig
from tasks.runtime import experiment_dir, train_batch_size


@task(name="train-step", cache_policy=NO_CACHE)
def train_step(config: ExperimentConfig, step: int) -> dict[str, float]:
    """Experiences stay untrained in the buffer until the step that used them has finished."""
    started = time.perf_counter()
    store = ExperienceStore.for_experiment(experiment_dir(config))
    try:
        batch = store.take(train_batch_size(config))
        if not batch:
            raise RuntimeError(f"train step {step}: the experience buffer has nothing to train on")
        metrics = policy_for(config).trainer.train_step(batch)
        store.mark_trained([e.eid for e in batch], step)
    finally:
        store.close()
    get_run_logger().info("train step %d: %d experiences, loss %.4f", step, len(batch), metrics.get("loss", float("nan")))
    return {**{f"train/{k}": v for k, v in metrics.items()}, "time/train_s": time.perf_counter() - started}
