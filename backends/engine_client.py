"""A RolloutEngine that forwards to an engine actor found by name (what workflows hold)."""

from __future__ import annotations

from typing import Any

import ray

from backends.rollout import Messages, RolloutEngine, Sample, SamplingSettings
from backends.vllm_engine import get_engine


class EngineClient(RolloutEngine):
    def __init__(self, name: str) -> None:
        self.name = name
        self._actor = get_engine(name)

    def generate(self, prompts: list[Messages], sampling: SamplingSettings) -> list[list[Sample]]:
        return ray.get(self._actor.generate.remote(prompts, sampling))

    def load_weights_from(self, model_dir: str, version: int) -> float:
        return ray.get(self._actor.load_weights_from.remote(model_dir, version))

    def model_version(self) -> int:
        return ray.get(self._actor.model_version.remote())

    def info(self) -> dict[str, Any]:
        return ray.get(self._actor.info.remote())
