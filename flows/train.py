"""Train stage: one optimizer step of the policy on experiences from the buffer."""

from __future__ import annotations

from prefect import flow

from schemas import ExperimentConfig
from tasks.train import train_step


@flow(name="train", log_prints=False)
def train(config: ExperimentConfig, step: int) -> dict[str, float]:
    """Take `buffer.train_batch_size` untrained experiences and train on them once."""
    return train_step(config, step)
