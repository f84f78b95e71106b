"""Weights as a handle: what a trainer publishes and rollout engines load, wherever the bytes are."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# folder: a Hugging Face folder of safetensors (checkpoint or /dev/shm staging);
# pushed: the trainer already streamed the tensors into the engines (CUDA IPC / NCCL), only the
#         version is left to stamp; tinker: a `tinker://` sampler-weights path of the Tinker service.
WeightsKind = Literal["folder", "pushed", "tinker"]


@dataclass(frozen=True)
class WeightsHandle:
    """Version `version` of the policy's weights, and where an engine finds them."""

    version: int
    kind: WeightsKind
    location: str  # the folder, the transport's name, or the tinker:// path

    def __post_init__(self) -> None:
        if self.version < 0:
            raise ValueError(f"weights version must be >= 0, got {self.version}")
