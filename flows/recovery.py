"""What the step loop does when the trainer died in the middle of a step (training or syncing)."""

from __future__ import annotations

from prefect import get_run_logger

from flows.sync import sync
from flows.train import train
from schemas import ExperimentConfig
from tasks.checkpoint import restore_checkpoint
from tasks.setup import revive_trainer


def retrain_after_trainer_death(
    config: ExperimentConfig, step: int, model_dir: str, total_steps: int, error: BaseException, sync_now: bool = False
) -> dict[str, float]:
    """Step `step` failed with `error` while training (or syncing). If the trainer died, start it again
    from the latest checkpoint, train the steps after that checkpoint once more (their experiences are
    in the buffer: restoring marks them untrained, so each is trained once in the end), sync when
    `sync_now`, and return the step's metrics. If the trainer is alive, it was not that: `error` is raised."""
    if not revive_trainer(config, model_dir, total_steps):
        raise error
    done = restore_checkpoint(config)
    get_run_logger().warning(
        "step %d: the trainer died (%s); restarted from the checkpoint of step %d, training steps %d-%d again",
        step, type(error).__name__, done, done + 1, step,
    )
    metrics: dict[str, float] = {}
    for redo in range(done + 1, step + 1):
        metrics = train(config, redo)
    if sync_now:
        metrics |= sync(config, step)
    return metrics
