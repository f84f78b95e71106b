"""Bring up what a run needs: the model folder, the rollout engines and the trainer (Ray actors)."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from backends import trainer_actor, vllm_engine
from backends.models import resolve_model_path
from backends.weight_sync import remove_shared_memory
from schemas import ExperimentConfig
from tasks.runtime import experiment_id


@task(name="prepare-model", retries=2, retry_delay_seconds=5, cache_policy=NO_CACHE)
def prepare_model(config: ExperimentConfig) -> str:
    """A local Hugging Face folder for model_path (converted once from the offline GGUF if needed)."""
    path = resolve_model_path(config.model.model_path)
    get_run_logger().info("model %s → %s", config.model.model_path, path)
    return str(path)


@task(name="connect-ray", retries=2, retry_delay_seconds=3, cache_policy=NO_CACHE)
def connect_ray(config: ExperimentConfig) -> dict[str, float]:
    vllm_engine.connect_ray(config.cluster.ray_address)
    import ray

    return {k: float(v) for k, v in ray.cluster_resources().items() if k in ("CPU", "GPU", "memory")}


@task(name="start-rollout-engines", retries=1, retry_delay_seconds=5, cache_policy=NO_CACHE)
def start_rollout_engines(config: ExperimentConfig, model_dir: str) -> list[str]:
    """Start `engine_num` vLLM actors (or find them, when a retried task gets here again)."""
    settings = vllm_engine.EngineSettings.from_config(config)
    settings.model_path = model_dir
    names = vllm_engine.start_engines(settings, config.explorer.rollout_model.engine_num, experiment_id(config))
    get_run_logger().info("rollout engines ready: %s", ", ".join(names))
    return names


@task(name="start-trainer", retries=1, retry_delay_seconds=5, cache_policy=NO_CACHE)
def start_trainer(config: ExperimentConfig, model_dir: str, total_steps: int) -> str:
    name = trainer_actor.start_trainer(experiment_id(config), config.model_dump_json(), model_dir, total_steps)
    get_run_logger().info("trainer %s ready (%s)", name, config.trainer.trainer_type)
    return name


def revive_engines(config: ExperimentConfig) -> list[str]:
    """Restart the engines whose actor died, serving the trainer's current weights (a task retry
    after a crashed engine then finds a working one); returns the names restarted."""
    import ray

    experiment = experiment_id(config)
    names = vllm_engine.engine_names(experiment, config.explorer.rollout_model.engine_num)
    dead = [name for name in names if not vllm_engine.engine_alive(name)]
    if not dead:
        return []
    get_run_logger().warning("rollout engines %s died: starting them again", ", ".join(dead))
    settings = vllm_engine.EngineSettings.from_config(config)
    vllm_engine.start_engines(settings, config.explorer.rollout_model.engine_num, experiment)
    version = ray.get(trainer_actor.get_trainer(experiment).global_step.remote())
    if version:
        from tasks.sync import push_trainer_weights

        push_trainer_weights(config, dead, version)
    return dead


def release_actors(experiment: str) -> None:
    """Stop the experiment's engines and trainer; safe when none were started (flow state hooks)."""
    import ray

    if ray.is_initialized():
        vllm_engine.stop_engines(experiment)
        trainer_actor.stop_trainer(experiment)
    remove_shared_memory(experiment)  # the weights are in the checkpoints; RAM is not kept for them


@task(name="check-requirements", cache_policy=NO_CACHE)
def check_requirements(config: ExperimentConfig) -> None:
    """Fail fast, before any engine starts, when the cluster lacks what the experiment needs."""
    import ray

    gpus = int(ray.cluster_resources().get("GPU", 0))
    wanted = config.cluster.gpu_per_node or 0
    reasons = []
    if wanted > 0:
        reasons.append(f"cluster.gpu_per_node={wanted}")
    if config.trainer.trainer_type == "verl":
        reasons.append("trainer.trainer_type='verl' (FSDP on GPUs)")
    if reasons and gpus == 0:
        raise RuntimeError(
            f"{config.project}/{config.name} needs GPUs ({', '.join(reasons)}), but the Ray cluster "
            f"({config.cluster.ray_address}) has none. Run it from a worker of the rft-gpu work pool on a GPU "
            "machine, or run the CPU recipe `gsm8k`."
        )
    if config.trainer.trainer_type == "tinker" or config.model.tinker.enable:
        from backends.secrets import tinker_api_key_with_source

        _, source = tinker_api_key_with_source()  # raises naming where the key is looked for
        get_run_logger().info("Tinker API key: from %s", source)
    if reason := trainer_actor.unbuilt_adapter(config.trainer.trainer_type):
        raise NotImplementedError(f"{config.project}/{config.name}: {reason}")
