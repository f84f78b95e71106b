"""A RolloutEngine that forwards to a vLLM engine actor (what workflows and transports hold)."""

from __future__ import annotations

from typing import Any

import ray

from backends.history import CallRecord
from backends.local import ray_cluster
from backends.rollout import RolloutEngine, Sample, SamplingSettings, TokenIds, TopScores
from backends.weights import WeightsHandle


class EngineClient(RolloutEngine):
    batches_calls = True  # the actor serves calls at once through its engine loop (backends.local.engine_loop)

    def __init__(self, name: str) -> None:
        self.name = name
        self.actor = ray_cluster.get_actor(name)

    def generate(self, prompts: list[TokenIds], sampling: SamplingSettings) -> list[list[Sample]]:
        return ray.get(self.actor.generate.remote(prompts, sampling))

    def score(self, sequences: list[TokenIds], starts: list[int], k: int = 0) -> list[TopScores]:
        return ray.get(self.actor.score.remote(sequences, starts, k))

    def load_weights(self, weights: WeightsHandle) -> float:
        return ray.get(self.actor.load_weights.remote(weights))

    def model_version(self) -> int:
        return ray.get(self.actor.model_version.remote())

    def info(self) -> dict[str, Any]:
        return ray.get(self.actor.info.remote())

    def cpu_seconds(self) -> float:
        return ray.get(self.actor.cpu_seconds.remote())

    def openai_base_url(self) -> str | None:
        return ray.get(self.actor.openai_base_url.remote())

    def openai_api_key(self) -> str:
        return ray.get(self.actor.openai_api_key.remote())

    def call_history(self, rollout_id: str) -> list[CallRecord]:
        return ray.get(self.actor.call_history.remote(rollout_id))

    def alive(self, timeout_s: float = 60.0) -> bool:
        """Whether the actor answers (a dead engine raises RayActorError, a stuck one times out)."""
        try:
            ray.get(self.actor.model_version.remote(), timeout=timeout_s)
            return True
        except ray.exceptions.RayError:
            return False
