"""The policy of an experiment: its trainer and its rollout engines, wherever they run.

Tasks talk to a `Policy` and to nothing else. `policy_for(config)` is cheap and stateless: it builds
a handle that finds the experiment's running parts by name (Ray actors) or by address (a service),
so no handle crosses Prefect and a retried task finds what an earlier attempt started.

    local (backends.local.policy):   vLLM engines + a trainer actor (torch or veRL) on Ray
    tinker (backends.tinker.policy): one Tinker service for training and sampling
"""

from __future__ import annotations

import re
import time
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from backends import registry
from backends.rollout import RolloutEngine
from backends.trainer import TrainerBackend
from backends.weights import WeightsHandle

if TYPE_CHECKING:
    from schemas import ExperimentConfig


def experiment_id(config: ExperimentConfig) -> str:
    """A name-safe id of the experiment (actor and folder names are derived from it)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{config.project}-{config.name}").strip("-")


class Policy(ABC):
    """Start, train, sample, sync, revive, release: everything a run does with its model."""

    def __init__(self, config: ExperimentConfig) -> None:
        self.config = config
        self.experiment = experiment_id(config)

    # -- bring up ------------------------------------------------------------------------------

    @abstractmethod
    def connect(self) -> dict[str, float]:
        """Join the compute the policy runs on (a Ray cluster, a service); returns its resources."""

    def preflight(self) -> list[str]:
        """Check, in seconds and without starting anything, that what the policy needs outside this
        process answers: a cluster's address, a service (Tinker: its API, with a short timeout). Raise
        `backends.errors.ConfigError` naming the setting; return lines worth logging."""
        return []

    def check_secrets(self) -> list[str]:
        """Fetch the secrets the experiment's trainer and engines need (backends/registry.py: each backend
        names its own); returns where each came from, never a secret. Raises naming where a missing one
        is looked for."""
        return registry.secret_sources(self.config)

    @abstractmethod
    def check_requirements(self) -> list[str]:
        """Fail (raise) before anything starts when the compute lacks what the config needs; returns
        lines worth logging (which devices, where a key came from — never a secret)."""

    @abstractmethod
    def start_engines(self, model_dir: str) -> list[str]:
        """Start the rollout engines (or find them running); returns their names."""

    @abstractmethod
    def start_trainer(self, model_dir: str, total_steps: int) -> str:
        """Start the trainer (or find it running); returns its name."""

    # -- use -----------------------------------------------------------------------------------

    @property
    @abstractmethod
    def trainer(self) -> TrainerBackend:
        """The running trainer."""

    @abstractmethod
    def engines(self) -> list[RolloutEngine]:
        """The running rollout engines."""

    def auxiliary_engines(self, index: int) -> list[RolloutEngine]:
        """The engines of auxiliary model `index` (explorer.auxiliary_models), started with the rollout engines."""
        raise NotImplementedError(f"{type(self).__name__} starts no auxiliary models")

    @abstractmethod
    def publish(self, version: int) -> WeightsHandle:
        """The trainer's current weights, made loadable as `version` (trainer side of a sync)."""

    @abstractmethod
    def load(self, weights: WeightsHandle) -> None:
        """Every engine serves `weights` (engine side of a sync); older published versions may go."""

    def sync(self, version: int) -> dict[str, float]:
        """Publish the trainer's weights as `version` and have every engine load them; returns metrics."""
        started = time.perf_counter()
        weights = self.publish(version)
        published = time.perf_counter() - started
        self.load(weights)
        return {"time/sync_s": time.perf_counter() - started, "sync/export_s": published, "sync/model_version": float(version)}

    # -- what each side uses (tracking/usage.py): "explore" the rollout engines, "train" the trainer ------

    def cpu_seconds(self, side: str) -> float:
        """CPU seconds the processes of `side` have used since they started (its worker processes too);
        a task takes the difference over its work."""
        if side == "explore":
            return sum(engine.cpu_seconds() for engine in self.engines())
        return self.trainer.cpu_seconds()

    def gpus(self, side: str) -> int:
        """GPUs `side` holds. Default none: a service's GPUs are not the run's to count."""
        return 0

    @abstractmethod
    def revive(self) -> list[str]:
        """Start again the engines that died, serving the trainer's current weights; returns their names."""

    def revive_trainer(self, model_dir: str, total_steps: int) -> bool:
        """Start the trainer again if it died; returns whether it had. A restarted trainer holds the
        initial model: the caller restores the latest checkpoint and trains the lost steps again.
        Default: a trainer that cannot die on its own (a service keeps its state)."""
        return False

    @abstractmethod
    def release(self, engines: bool = True, trainer: bool = True) -> None:
        """Stop the experiment's engines and/or trainer (safe when nothing was started)."""

    def timeline(self, path: str) -> str | None:
        """Write a trace of what ran where so far to `path` (monitor.enable_ray_timeline); returns the
        path, or None when this policy has nothing to trace."""
        return None

    def describe(self) -> dict[str, Any]:
        """What runs where, for logs: the policy kind and the chosen trainer and rollout kinds."""
        return {
            "policy": type(self).__name__,
            "trainer": self.config.trainer.trainer_type,
            "rollout": self.config.explorer.rollout_model.engine_type,
        }


def policy_for(config: ExperimentConfig) -> Policy:
    """The policy of `config`: its rollout engine type decides where it lives."""
    return registry.policy_class(config.explorer.rollout_model.engine_type)(config)
