"""Progress people can watch: a Prefect progress artifact, and listeners (the CLI's progress bar)."""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID

from prefect.artifacts import create_progress_artifact, update_progress_artifact

# Called in-process with (step, total_steps, metrics); `rft run` registers its progress bar here.
ProgressListener = Callable[[int, int, dict[str, float]], None]
LISTENERS: list[ProgressListener] = []


class StepProgress:
    def __init__(self, total_steps: int, description: str, done: int = 0, artifact: str | None = None) -> None:
        self.total = max(total_steps, 1)
        self.description = description
        self.artifact: UUID = UUID(artifact) if artifact else create_progress_artifact(
            progress=100.0 * done / self.total, description=f"{description}: step {done}/{self.total}"
        )

    @classmethod
    def attach(cls, artifact: str, total_steps: int, description: str) -> StepProgress:
        """The progress artifact a parent flow created, updated from a child flow."""
        return cls(total_steps, description, artifact=artifact)

    def update(self, step: int, metrics: dict[str, float]) -> None:
        update_progress_artifact(
            self.artifact,
            progress=100.0 * step / self.total,
            description=f"{self.description}: step {step}/{self.total}",
        )
        for listener in list(LISTENERS):
            listener(step, self.total, metrics)
