"""Weights as a handle: what a trainer publishes and rollout engines load, wherever the bytes are."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

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


class StateWeights:
    """Named full tensors (a state dict under the names of a Hugging Face folder) as a push sends them: their
    metadata first, then the tensors in the same order (backends.local.weight_sync.NamedWeights)."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state

    def metadata(self) -> list[tuple[str, Any, tuple[int, ...]]]:
        return [(name, tensor.dtype, tuple(tensor.shape)) for name, tensor in self.state.items()]

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        return iter(self.state.items())
