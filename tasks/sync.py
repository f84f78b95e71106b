"""Sync: the engines serve the trainer's current weights, stamped with a new model version."""

from __future__ import annotations

import time

import ray
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from backends.trainer_actor import get_trainer
from backends.vllm_engine import cluster_has_gpus, engine_names
from backends.weight_sync import make_transport
from schemas import ExperimentConfig
from tasks.runtime import experiment_dir, experiment_id


def push_trainer_weights(config: ExperimentConfig, engines: list[str], version: int) -> float:
    """Export the trainer's weights and have `engines` serve them as `version`; returns export seconds."""
    started = time.perf_counter()
    experiment = experiment_id(config)
    transport = make_transport(
        config.synchronizer.sync_method, cluster_has_gpus(), config.explorer.rollout_model.tensor_parallel_size
    )
    export_dir = transport.export_dir(experiment_dir(config) / "sync" / "huggingface", experiment)
    ray.get(get_trainer(experiment).export_weights.remote(str(export_dir)))
    exported = time.perf_counter() - started
    transport.send(engines, export_dir, version)
    return exported


@task(name="sync-weights", retries=1, retry_delay_seconds=5, cache_policy=NO_CACHE)
def sync_weights(config: ExperimentConfig, version: int) -> dict[str, float]:
    started = time.perf_counter()
    engines = engine_names(experiment_id(config), config.explorer.rollout_model.engine_num)
    export_s = push_trainer_weights(config, engines, version)
    seconds = time.perf_counter() - started
    get_run_logger().info("engines serve model version %d (%.1f s)", version, seconds)
    return {"time/sync_s": seconds, "sync/export_s": export_s, "sync/model_version": float(version)}
