"""The part every workflow test's stand-in engine shares: a `RolloutEngine` whose sampling a test scripts.

A stand-in replaces vLLM only where a test needs exact responses (a workflow's parsing, scoring and masks); the
engine's own behaviour is tested on the real one (tests/test_vllm_engine.py).
"""

from __future__ import annotations

from typing import Any

from backends.rollout import RolloutEngine
from backends.weights import WeightsHandle


class StandInEngine(RolloutEngine):
    """Serves weights version `version` (a sync sets it) under the model path "scripted"; subclasses write
    `generate`."""

    def __init__(self, version: int = 0) -> None:
        self.version = version

    def load_weights(self, weights: WeightsHandle) -> float:
        self.version = weights.version
        return 0.0

    def model_version(self) -> int:
        return self.version

    def info(self) -> dict[str, Any]:
        return {"model_path": "scripted"}
