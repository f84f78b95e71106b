"""The trainer-backend interface: native torch, veRL and Tinker adapters all implement it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

from buffer.experience import Experience


class TrainerBackend(ABC):
    """Owns the policy being trained and its optimizer; knows nothing of Prefect or the engines."""

    @abstractmethod
    def train_step(self, batch: list[Experience]) -> dict[str, float]:
        """One optimizer step on a batch whose advantages are filled in; returns metrics."""

    @abstractmethod
    def export_weights(self, model_dir: Path) -> Path:
        """Write the current weights as a Hugging Face folder (safetensors) for the engines."""

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
