"""Sync: the trainer publishes a weights version, the engines load it.

The two halves are separate tasks so that the explorer and the trainer can run apart (concurrent
threads of one run, or separate deployments sharing the experiment folder): every published handle
is recorded in `sync/published.json`, where an explorer in another process finds it.
"""

from __future__ import annotations

import time
from dataclasses import asdict

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from backends.policy import policy_for
from backends.weights import WeightsHandle
from checkpointing import layout
from checkpointing.layout import experiment_dir
from checkpointing.records import read_json, write_json_atomic
from schemas import ExperimentConfig
from tasks.failures import transient_only
from tasks.setup import revive_engines
from tasks.usage import SideUsage

KEEP_RECORDS = 8  # published versions remembered (older ones' files are pruned by the engines' loads)


def published(config: ExperimentConfig) -> dict[int, WeightsHandle]:
    """Every recorded published version → its handle."""
    record = read_json(layout.sync_dir(experiment_dir(config)) / layout.PUBLISHED, {"versions": {}})
    return {int(v): WeightsHandle(**handle) for v, handle in record["versions"].items()}


def newest_published(config: ExperimentConfig) -> int:
    """The newest published version (0: none, the engines' initial weights)."""
    return max(published(config), default=0)


def _record(config: ExperimentConfig, weights: WeightsHandle) -> None:
    versions = published(config)
    versions[weights.version] = weights
    kept = {str(v): asdict(versions[v]) for v in sorted(versions)[-KEEP_RECORDS:]}
    write_json_atomic(layout.sync_dir(experiment_dir(config)) / layout.PUBLISHED, {"versions": kept})


@task(name="publish-weights", retries=1, retry_delay_seconds=5, retry_condition_fn=transient_only, cache_policy=NO_CACHE)
def publish_weights(config: ExperimentConfig, version: int) -> dict[str, float]:
    """Trainer side: the current weights become loadable as `version` (recorded for other processes)."""
    started = time.perf_counter()
    weights = policy_for(config).publish(version)
    _record(config, weights)
    return {"sync/export_s": time.perf_counter() - started, "sync/published_version": float(version)}


@task(name="load-weights", retries=1, retry_delay_seconds=5, retry_condition_fn=transient_only, cache_policy=NO_CACHE)
def load_weights(config: ExperimentConfig, version: int) -> dict[str, float]:
    """Explorer side: every engine serves published `version`."""
    started = time.perf_counter()
    handles = published(config)
    if version not in handles:
        raise LookupError(f"weights version {version} was never published (published: {sorted(handles) or 'none'})")
    revive_engines(config)  # an engine that died since the last task is started again first
    policy_for(config).load(handles[version])
    get_run_logger().info("engines serve model version %d", version)
    return {"sync/load_s": time.perf_counter() - started, "sync/model_version": float(version)}


@task(name="sync-weights", retries=1, retry_delay_seconds=5, retry_condition_fn=transient_only, cache_policy=NO_CACHE)
def sync_weights(config: ExperimentConfig, version: int) -> dict[str, float]:
    """Both halves at once (explorer and trainer taking turns)."""
    revive_engines(config)  # an engine that died since the last task is started again first
    policy = policy_for(config)
    usage = SideUsage(config, "explore", "train")
    started = time.perf_counter()
    weights = policy.publish(version)
    _record(config, weights)
    exported = time.perf_counter() - started
    policy.load(weights)
    seconds = time.perf_counter() - started
    get_run_logger().info("engines serve model version %d (%.1f s)", version, seconds)
    return {"time/sync_s": seconds, "sync/export_s": exported, "sync/model_version": float(version), **usage.metrics("sync")}
