"""Progress people can watch: a Prefect progress artifact, a progress.json in the experiment folder (what
`rft watch` and scripts/up.sh show), and listeners (the CLI's progress bar)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from uuid import UUID

from prefect.artifacts import create_progress_artifact, update_progress_artifact

from checkpointing.records import read_json, write_json_atomic

# Called in-process with (step, total_steps, metrics); `rft run` registers its progress bar here.
ProgressListener = Callable[[int, int, dict[str, float]], None]
LISTENERS: list[ProgressListener] = []
PROGRESS = "progress.json"  # {experiment_dir}/progress.json: step, total, last reward, since when


class StepProgress:
    def __init__(self, total_steps: int, description: str, done: int = 0, artifact: str | None = None,
                 folder: Path | None = None) -> None:
        self.total = max(total_steps, 1)
        self.description = description
        self.artifact: UUID = UUID(artifact) if artifact else create_progress_artifact(
            progress=100.0 * done / self.total, description=f"{description}: step {done}/{self.total}"
        )
        self.file = folder / PROGRESS if folder is not None else None
        if self.file is not None and not artifact:  # this attempt's start: the ETA counts from here
            write_json_atomic(self.file, {"step": done, "total": self.total, "started": time.time(), "started_step": done,
                                          "updated": time.time(), "reward": None})

    @classmethod
    def attach(cls, artifact: str, total_steps: int, description: str, folder: Path | None = None) -> StepProgress:
        """The progress artifact a parent flow created, updated from a child flow."""
        return cls(total_steps, description, artifact=artifact, folder=folder)

    def update(self, step: int, metrics: dict[str, float]) -> None:
        update_progress_artifact(
            self.artifact,
            progress=100.0 * step / self.total,
            description=f"{self.description}: step {step}/{self.total}",
        )
        if self.file is not None:
            record = read_json(self.file, {"started": time.time(), "started_step": 0})
            reward = metrics.get("explore/reward_mean", metrics.get("train/loss"))
            reward_name = "reward" if "explore/reward_mean" in metrics else "loss"
            write_json_atomic(self.file, record | {"step": step, "total": self.total, "updated": time.time(),
                                                   "reward": reward, "reward_name": reward_name,
                                                   "tasks_failed_share": metrics.get("explore/tasks_failed_share", 0.0)})
        for listener in list(LISTENERS):
            listener(step, self.total, metrics)
