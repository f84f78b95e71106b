"""The rollout-engine interface: token ids in, sampled token ids and their logprobs out.

Engines never see chat messages: the workflow layer renders a chat to token ids once (the chat
template, `workflows.render`), so a multi-turn trajectory continues from its exact tokens and a
token-in sampler (Tinker's) implements the same interface as vLLM.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from backends.history import CallRecord
from backends.weights import WeightsHandle

TokenIds = list[int]


@dataclass
class SamplingSettings:
    """Per-request sampling; built from a taskset's rollout_args and max_response_tokens."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 128
    min_tokens: int = 0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()  # besides the model's own end-of-turn tokens


@dataclass
class Sample:
    """One completion, with the token ids and per-token logprobs training needs."""

    prompt_token_ids: TokenIds
    response_token_ids: TokenIds
    logprobs: list[float]  # logprob of each sampled response token under the sampling distribution
    finish_reason: str  # "stop" | "length"
    text: str = ""  # the decoded response; the workflow layer decodes when an engine leaves it empty


@dataclass
class TopScores:
    """A model's scores of given tokens (a teacher's of the student's samples), from a start position on: each
    token's log-prob, and the model's `k` likeliest tokens at each position with their log-probs, likeliest first."""

    logprobs: list[float]
    top_ids: list[list[int]]
    top_logprobs: list[list[float]]


class RolloutEngine(ABC):
    """An inference engine that samples completions and can take new weights while running."""

    # Whether calls made at once from many threads are batched by the engine itself, each returning when its own
    # requests are done (a vLLM engine's loop). The workflow runner merges calls for an engine that does not.
    batches_calls: bool = False

    @abstractmethod
    def generate(self, prompts: list[TokenIds], sampling: SamplingSettings) -> list[list[Sample]]:
        """Sample `sampling.n` completions for each prompt (token ids, chat template already applied)."""

    def score(self, sequences: list[TokenIds], starts: list[int], k: int = 0) -> list[TopScores]:
        """The model's log-prob of each token of every sequence from position `starts[i]` on, and its `k` likeliest
        tokens at each of those positions (temperature 1): a teacher scoring the student's rollouts, prompt and
        response given as one sequence."""
        raise NotImplementedError(f"{type(self).__name__} does not score given tokens")

    @abstractmethod
    def load_weights(self, weights: WeightsHandle) -> float:
        """Serve the weights `weights` points at, as model version `weights.version`; returns seconds taken."""

    @abstractmethod
    def model_version(self) -> int:
        """The version of the weights being served (0 = the initial model)."""

    @abstractmethod
    def info(self) -> dict[str, Any]:
        """Static facts for logs and metrics: model path, device, dtype, tensor parallel size."""

    def cpu_seconds(self) -> float:
        """CPU seconds the engine's processes have used since it started (tracking/usage.py). Default 0: a
        service samples (Tinker), and the requests sent from this process are not the sampling."""
        return 0.0

    # -- the OpenAI-compatible endpoint (explorer.rollout_model.enable_openai_api) -----------------

    def openai_base_url(self) -> str | None:
        """The engine's OpenAI-compatible endpoint (`http://host:port/v1`), or None when it has none."""
        return None

    def openai_api_key(self) -> str:
        """The endpoint's API key for the pipeline's own clients ("EMPTY": the endpoint takes none)."""
        return "EMPTY"

    def call_history(self, rollout_id: str) -> list[CallRecord]:
        """The calls the endpoint recorded under `rollout_id` (enable_history), forgotten once read."""
        raise NotImplementedError(f"{type(self).__name__} records no OpenAI calls")
