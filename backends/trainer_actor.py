"""The trainer runs in a named Ray actor, so every Prefect task of a run finds the same live model.

Tasks look the actor up by name (`trainer_name(experiment_id)`); no handle crosses Prefect.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import ray

from backends.trainer import TrainerBackend
from buffer.experience import Experience

NAMESPACE = "rft"


def trainer_name(experiment_id: str) -> str:
    return f"{experiment_id}-trainer"


BUILT_TRAINERS = ("torch",)  # veRL and Tinker adapters are still to come


def unbuilt_adapter(trainer_type: str) -> str | None:
    """Why `trainer.trainer_type` cannot run yet, or None when its adapter exists."""
    if trainer_type in BUILT_TRAINERS:
        return None
    return f"trainer.trainer_type={trainer_type!r}: this adapter is not built yet; use 'torch' (CPU or one GPU)"


def make_backend(config_json: str, model_dir: str, total_steps: int) -> TrainerBackend:
    """The one place that maps `trainer.trainer_type` to an adapter."""
    from schemas import ExperimentConfig

    config = ExperimentConfig.model_validate_json(config_json)
    kind = config.trainer.trainer_type
    if kind == "torch":
        from backends.torch_trainer import TorchTrainer

        return TorchTrainer(config, Path(model_dir), total_steps)
    if reason := unbuilt_adapter(kind):
        raise NotImplementedError(reason)
    raise ValueError(f"trainer.trainer_type: unknown trainer {kind!r}")


@ray.remote
class TrainerActor:
    def __init__(self, config_json: str, model_dir: str, total_steps: int, num_threads: int) -> None:
        import torch

        # Ray pins actors to OMP_NUM_THREADS=1; the trainer has the cores while the engines wait.
        os.environ["OMP_NUM_THREADS"] = str(num_threads)
        torch.set_num_threads(num_threads)
        self.backend = make_backend(config_json, model_dir, total_steps)

    def train_step(self, batch: list[Experience]) -> dict[str, float]:
        return self.backend.train_step(batch)

    def export_weights(self, model_dir: str) -> str:
        return str(self.backend.export_weights(Path(model_dir)))

    def save_checkpoint(self, path: str) -> None:
        self.backend.save_checkpoint(Path(path))

    def load_checkpoint(self, path: str) -> None:
        self.backend.load_checkpoint(Path(path))

    def global_step(self) -> int:
        return self.backend.global_step

    def ping(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "global_step": self.backend.global_step}


def start_trainer(experiment_id: str, config_json: str, model_dir: str, total_steps: int) -> str:
    """Start (or find, on a retried run) the experiment's trainer actor; returns its name."""
    name = trainer_name(experiment_id)
    try:
        ray.get_actor(name, namespace=NAMESPACE)
        return name
    except ValueError:
        pass
    cluster_gpus = int(ray.cluster_resources().get("GPU", 0))
    threads = max(int(ray.cluster_resources().get("CPU", 1)), 1)
    TrainerActor.options(
        name=name,
        namespace=NAMESPACE,
        lifetime="detached",
        num_cpus=0,  # the trainer and the engines take turns on the same cores in sync mode
        num_gpus=1 if cluster_gpus else 0,
    ).remote(config_json, model_dir, total_steps, threads)
    actor = ray.get_actor(name, namespace=NAMESPACE)
    ray.get(actor.ping.remote())  # surface a failed start here, not at the first step
    return name


def get_trainer(experiment_id: str) -> Any:
    return ray.get_actor(trainer_name(experiment_id), namespace=NAMESPACE)


def stop_trainer(experiment_id: str) -> None:
    try:
        ray.kill(get_trainer(experiment_id))
    except ValueError:
        pass
