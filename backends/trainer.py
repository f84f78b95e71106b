"""The trainer-backend interface: native torch, veRL and Tinker adapters all implement it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import algorithms
from backends.cpu_time import process_tree_cpu_s
from backends.weights import WeightsHandle
from buffer.experience import Experience

if TYPE_CHECKING:
    from schemas import ExperimentConfig


@dataclass(frozen=True)
class TrainerDevices:
    """The compute a trainer may use, as the policy planned it (see backends.local.policy.plan_resources)."""

    gpus: int = 0  # GPUs the trainer trains on (0: CPU)
    threads: int = 1  # CPU threads of its computation, in all
    cpus: float = 0.0  # Ray CPUs it reserves, in all (0 while it takes turns with the engines)
    nice: int = 0  # CPU priority below the engines' (Unix nice): sampling is the long side of an overlapped step


class TrainerBackend(ABC):
    """Owns the policy being trained and its optimizer; knows nothing of Prefect or the engines."""

    @abstractmethod
    def train_step(self, batch: list[Experience]) -> dict[str, float]:
        """One optimizer step on a batch whose advantages are filled in; returns metrics."""

    @abstractmethod
    def logprobs(self, batch: list[Experience]) -> list[list[float]]:
        """Logprob of each response token under the current weights (at the rollout temperature)."""

    @abstractmethod
    def publish_weights(self, version: int, folder: Path | None) -> WeightsHandle:
        """Make the current weights loadable by rollout engines as `version`.

        Folder-based trainers write a Hugging Face folder of safetensors into `folder` (chosen by the
        weight transport); a service (Tinker) saves them where it keeps weights and ignores `folder`.
        """

    @abstractmethod
    def save_checkpoint(self, path: Path) -> None:
        """Everything exact resumption needs: weights, optimizer, scheduler, RNG states."""

    @abstractmethod
    def load_checkpoint(self, path: Path) -> None:
        """Restore what `save_checkpoint` wrote."""

    @property
    @abstractmethod
    def global_step(self) -> int:
        """Optimizer steps taken so far (restored by load_checkpoint)."""

    def push_weights(self, transport: Any, engine_actors: Sequence[Any], version: int) -> WeightsHandle:
        """GPU: stream the current weights into running vLLM engines through `transport` (its
        push_weights / push_module); the engines then only stamp `version`."""
        raise NotImplementedError(f"{type(self).__name__} cannot push weights; use synchronizer.sync_method checkpoint")

    def cpu_seconds(self) -> float:
        """CPU seconds the trainer's processes have used since they started (tracking/usage.py): by default
        the process it runs in (the trainer actor) and its children; a backend with worker processes adds theirs."""
        return process_tree_cpu_s()

    def check_alive(self) -> None:
        """Raise if a process the trainer needs beyond its own has died (the policy then starts the trainer
        again from the latest checkpoint). By default there is none: the trainer's process answering is enough."""

    def close(self) -> None:
        """Free what the trainer holds beyond its own process (worker processes, placement groups)."""


def scoring_temperature(config: ExperimentConfig) -> float:
    """The temperature a trainer scores tokens at: the one they were sampled at. Preference pairs were not sampled:
    the model's own distribution (temperature 1), for the policy and the reference alike."""
    if algorithms.is_preference_loss(config.algorithm.policy_loss_fn):
        return 1.0
    taskset = config.buffer.explorer_input.taskset
    temperature = taskset.rollout_args.temperature if taskset is not None else 1.0
    return temperature if temperature and temperature > 0 else 1.0
