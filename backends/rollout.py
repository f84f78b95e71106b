"""The rollout-engine interface: what explore and sync need from an inference engine."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

Messages = list[dict[str, str]]  # an OpenAI-style chat: [{"role": ..., "content": ...}, ...]


@dataclass
class SamplingSettings:
    """Per-request sampling; built from a taskset's rollout_args and max_response_tokens."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 128
    seed: int | None = None


@dataclass
class Sample:
    """One completion, with the token ids and per-token logprobs training needs."""

    prompt_token_ids: list[int]
    response_token_ids: list[int]
    logprobs: list[float]  # logprob of each sampled response token under the sampling distribution
    text: str
    finish_reason: str  # "stop" | "length"


class RolloutEngine(ABC):
    """An inference engine that samples completions and can take new weights while running."""

    @abstractmethod
    def generate(self, prompts: list[Messages], sampling: SamplingSettings) -> list[list[Sample]]:
        """Sample `sampling.n` completions for each chat; the engine applies the chat template."""

    @abstractmethod
    def load_weights_from(self, model_dir: str, version: int) -> float:
        """Serve the weights now in `model_dir` as model version `version`; returns seconds taken."""

    @abstractmethod
    def model_version(self) -> int:
        """The version of the weights being served (0 = the initial model)."""

    @abstractmethod
    def info(self) -> dict[str, Any]:
        """Static facts for logs and metrics: model path, device, dtype, tensor parallel size."""
