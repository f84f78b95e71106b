"""Bring up what a run needs: the model folder, the compute, the rollout engines and the trainer; and
bring back what died (engines, the trainer), counting each restart."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

import tracking
from backends.errors import ConfigError
from backends.policy import policy_for
from checkpointing import layout
from checkpointing.layout import experiment_dir
from checkpointing.models import resolve_model_path
from preflight import preflight
from schemas import ExperimentConfig
from tasks.failures import transient_only

RAY_TIMELINE = "ray_timeline.json"  # Chrome trace format: chrome://tracing or ui.perfetto.dev


@task(name="prepare-model", retries=2, retry_delay_seconds=5, retry_condition_fn=transient_only, cache_policy=NO_CACHE)
def prepare_model(config: ExperimentConfig) -> str:
    """A local Hugging Face folder for model_path (converted once from the offline GGUF if needed)."""
    path = resolve_model_path(config.model.model_path)
    get_run_logger().info("model %s → %s", config.model.model_path, path)
    return str(path)


@task(name="connect", retries=2, retry_delay_seconds=3, retry_condition_fn=transient_only, cache_policy=NO_CACHE)
def connect(config: ExperimentConfig) -> dict[str, float]:
    """Join the compute the experiment's policy runs on (its Ray cluster, or its service)."""
    return policy_for(config).connect()


@task(name="start-rollout-engines", retries=1, retry_delay_seconds=5, retry_condition_fn=transient_only, cache_policy=NO_CACHE)
def start_rollout_engines(config: ExperimentConfig, model_dir: str) -> list[str]:
    """Start the rollout engines (or find them, when a retried task gets here again)."""
    names = policy_for(config).start_engines(model_dir)
    get_run_logger().info("rollout engines ready: %s", ", ".join(names))
    return names


@task(name="start-trainer", retries=1, retry_delay_seconds=5, retry_condition_fn=transient_only, cache_policy=NO_CACHE)
def start_trainer(config: ExperimentConfig, model_dir: str, total_steps: int) -> str:
    name = policy_for(config).start_trainer(model_dir, total_steps)
    get_run_logger().info("trainer %s ready (%s)", name, config.trainer.trainer_type)
    return name


def revive_engines(config: ExperimentConfig) -> list[str]:
    """Restart the engines that died, serving the trainer's current weights (a task retry after a
    crashed engine then finds a working one); returns the names restarted (counted as engine_restarts)."""
    revived = policy_for(config).revive()
    if revived:
        get_run_logger().warning("engines %s had died: started again", ", ".join(revived))
        tracking.count_restart(config, "engine", len(revived))
    return revived


@task(name="revive-trainer", cache_policy=NO_CACHE)
def revive_trainer(config: ExperimentConfig, model_dir: str, total_steps: int) -> bool:
    """Restart the trainer if it died (counted as trainer_restarts); it then holds the initial model:
    the caller restores the latest checkpoint. Returns whether it had died."""
    restarted = policy_for(config).revive_trainer(model_dir, total_steps)
    if restarted:
        get_run_logger().warning("the trainer had died: started again")
        tracking.count_restart(config, "trainer")
    return restarted


def release(config: ExperimentConfig, roles: tuple[str, ...] = ("explorer", "trainer")) -> None:
    """Stop what the sides in `roles` started (explorer: the engines, trainer: the trainer); safe when
    nothing was started (flow state hooks). With monitor.enable_ray_timeline the trace of what ran is
    written first, to {experiment_dir}/log/ray_timeline.json."""
    try:
        policy = policy_for(config)
    except NotImplementedError:  # a backend that is not built never started anything
        return
    if config.monitor.enable_ray_timeline:
        path = layout.log_dir(experiment_dir(config)) / RAY_TIMELINE
        path.parent.mkdir(parents=True, exist_ok=True)
        policy.timeline(str(path))
    policy.release(engines="explorer" in roles, trainer="trainer" in roles)


@task(name="check-secrets", cache_policy=NO_CACHE)
def check_secrets(config: ExperimentConfig) -> None:
    """The keys the backends need are there; logs where each comes from (never the key itself)."""
    try:
        policy = policy_for(config)
    except NotImplementedError as err:  # a backend that is not built yet
        raise ConfigError("explorer.rollout_model.engine_type", str(err)) from None
    for line in policy.check_secrets():  # raises naming where a missing key is looked for
        get_run_logger().info("%s", line)


@task(name="check-requirements", cache_policy=NO_CACHE)
def check_requirements(config: ExperimentConfig) -> None:
    """Fail fast, before any engine or actor starts, naming the setting: a backend that is not built,
    compute without the devices the config needs (a Tinker server that does not answer or refuses the key
    fails here within seconds), and the pre-flight (the cluster's address, the model, every taskset, the
    checkpoint folder, MLflow; see the preflight package)."""
    try:
        policy = policy_for(config)
    except NotImplementedError as err:  # a backend that is not built yet
        raise ConfigError("explorer.rollout_model.engine_type", str(err)) from None
    for line in [*policy.check_requirements(), *preflight(config)]:
        get_run_logger().info("%s/%s: %s", config.project, config.name, line)
