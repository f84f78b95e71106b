"""The trainer runs in a named Ray actor, so every Prefect task of a run finds the same live model.

`TrainerActor` hosts any `TrainerBackend` (chosen by `trainer.trainer_type`, see backends.registry);
`TrainerClient` is the same interface on the driver side, forwarding each call to the actor.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray

from backends import registry
from backends.local import capacity, ray_cluster
from backends.trainer import TrainerBackend, TrainerDevices
from backends.weights import WeightsHandle
from buffer.experience import Experience
from checkpointing.models import local_model_folder, origin_id

if TYPE_CHECKING:
    from schemas import ExperimentConfig


class TrainerActor:
    """Instantiated by Ray (see `start_trainer_actor`)."""

    def __init__(self, config: ExperimentConfig, model_dir: str, total_steps: int, devices: TrainerDevices,
                 model_id: str = "") -> None:
        """`config` is the driver's resolved config object, as Ray hands it over (in memory, never from a
        file): validating it again would re-run every rule on values already derived."""
        import torch

        # Ray pins actors to OMP_NUM_THREADS=1; the policy decides how many threads training gets.
        os.environ["OMP_NUM_THREADS"] = str(devices.threads)
        torch.set_num_threads(devices.threads)
        if devices.nice:
            os.nice(devices.nice)
        # the driver's folder; on another node the embedded model is converted there (or the folder is named missing)
        local = local_model_folder(model_dir, model_id)
        self.backend: TrainerBackend = registry.trainer_class(config.trainer.trainer_type)(
            config, local, total_steps, devices
        )

    def train_step(self, batch: list[Experience]) -> dict[str, float]:
        return self.backend.train_step(batch)

    def logprobs(self, batch: list[Experience]) -> list[list[float]]:
        return self.backend.logprobs(batch)

    def publish_weights(self, version: int, folder: str | None) -> WeightsHandle:
        return self.backend.publish_weights(version, Path(folder) if folder else None)

    def push_weights(self, transport: Any, engine_actors: Sequence[Any], version: int) -> WeightsHandle:
        """GPU: stream the weights into the engines (from this process, or from the backend's workers)."""
        return self.backend.push_weights(transport, engine_actors, version)

    def close(self) -> None:
        self.backend.close()

    def save_checkpoint(self, path: str) -> None:
        self.backend.save_checkpoint(Path(path))

    def load_checkpoint(self, path: str) -> None:
        self.backend.load_checkpoint(Path(path))

    def global_step(self) -> int:
        return self.backend.global_step

    def cpu_seconds(self) -> float:
        return self.backend.cpu_seconds()

    def ping(self) -> dict[str, Any]:
        import torch

        self.backend.check_alive()  # veRL: every worker process, not only this one
        return {"pid": os.getpid(), "global_step": self.backend.global_step, "threads": torch.get_num_threads()}


class TrainerClient(TrainerBackend):
    """The trainer actor, called as a TrainerBackend."""

    def __init__(self, name: str, before_compute: Callable[[], None] | None = None) -> None:
        """`before_compute`: called before each step or log-prob pass (the engines sharing its GPU go to sleep)."""
        self.name = name
        self.actor = ray_cluster.get_actor(name)
        self.before_compute = before_compute

    def train_step(self, batch: list[Experience]) -> dict[str, float]:
        if self.before_compute is not None:
            self.before_compute()
        return ray.get(self.actor.train_step.remote(batch))

    def logprobs(self, batch: list[Experience]) -> list[list[float]]:
        if self.before_compute is not None:
            self.before_compute()
        return ray.get(self.actor.logprobs.remote(batch))

    def publish_weights(self, version: int, folder: Path | None) -> WeightsHandle:
        return ray.get(self.actor.publish_weights.remote(version, str(folder) if folder else None))

    def push_weights(self, transport: Any, engine_actors: Sequence[Any], version: int) -> WeightsHandle:
        return ray.get(self.actor.push_weights.remote(transport, list(engine_actors), version))

    def save_checkpoint(self, path: Path) -> None:
        ray.get(self.actor.save_checkpoint.remote(str(path)))

    def load_checkpoint(self, path: Path) -> None:
        ray.get(self.actor.load_checkpoint.remote(str(path)))

    @property
    def global_step(self) -> int:
        return ray.get(self.actor.global_step.remote())

    def cpu_seconds(self) -> float:
        return ray.get(self.actor.cpu_seconds.remote())

    def ping(self, timeout_s: float | None = None) -> dict[str, Any]:
        return ray.get(self.actor.ping.remote(), timeout=timeout_s)


def start_trainer_actor(name: str, config: ExperimentConfig, model_dir: str, total_steps: int, plan: Any) -> None:
    """Start (or find, on a retried run) the trainer actor and wait until its model is loaded.

    `plan` (backends.local.policy.ResourcePlan): the trainer actor asks Ray for the devices itself, or
    (veRL) for none, its worker processes holding them."""
    if ray_cluster.has_actor(name):
        return
    capacity.require_gpus("cluster.gpu_per_node", f"the {config.trainer.trainer_type} trainer", plan.trainer_actor_gpus, 1)
    actor = ray.remote(TrainerActor).options(
        name=name,
        namespace=ray_cluster.NAMESPACE,
        lifetime="detached",
        num_cpus=plan.trainer_actor_cpus,
        num_gpus=plan.trainer_actor_gpus,
        # placeholder GPUs (capacity.gpus_compute) are the driver's word: the trainer places veRL's workers by it
        runtime_env={"env_vars": {"RFT_PLACEHOLDER_GPUS": os.environ["RFT_PLACEHOLDER_GPUS"]}}
        if "RFT_PLACEHOLDER_GPUS" in os.environ else None,
    ).remote(
        config, model_dir, total_steps,
        TrainerDevices(gpus=plan.trainer_gpus, threads=plan.trainer_threads, cpus=plan.trainer_cpus, nice=plan.trainer_nice),
        origin_id(model_dir, config.model.model_path),
    )
    # a failed start surfaces here, not at the first step; one Ray cannot place, within a bound
    capacity.wait_started([actor.ping.remote()], f"the trainer {name}",
                          f"{plan.trainer_actor_gpus} GPU(s) and {plan.trainer_actor_cpus:g} CPU(s)"
                          + (f" (its workers: {plan.trainer_gpus} GPU(s))" if plan.trainer_in_workers else ""),
                          on_timeout=lambda: ray.kill(actor, no_restart=True))


def stop_trainer_actor(name: str, close_timeout_s: float = 60.0) -> None:
    """Let the trainer free what it started beyond its process (veRL's workers and their placement
    group), then kill it."""
    try:
        actor = ray_cluster.get_actor(name)
    except LookupError:
        return
    try:
        ray.get(actor.close.remote(), timeout=close_timeout_s)
    except Exception:  # noqa: BLE001  a dead or stuck trainer is killed all the same
        pass
    ray.kill(actor)
