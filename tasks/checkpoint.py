"""Checkpoints: what exact resumption needs, written whole or not at all; and restoring from them."""

from __future__ import annotations

import shutil
from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from backends.policy import policy_for
from buffer.experience_store import ExperienceStore
from checkpointing import layout
from checkpointing.layout import experiment_dir
from checkpointing.merge import copy_side_files
from checkpointing.pruning import prune_checkpoints, remove_leftovers
from checkpointing.records import read_json, write_json_atomic, write_text_atomic
from schemas import ExperimentConfig
from tasks.failures import transient_only


@task(name="save-checkpoint", retries=1, retry_delay_seconds=5, retry_condition_fn=transient_only, cache_policy=NO_CACHE)
def save_checkpoint(config: ExperimentConfig, step: int, base_model_dir: str) -> str:
    """global_step_{step}/: trainer state (weights, optimizer, scheduler, RNG) and the buffer's read
    position (the explorer's taskset position follows from the buffer: one batch a step, or the batches
    dynamic sampling recorded); the folder appears only once complete."""
    exp = experiment_dir(config)
    final = layout.step_dir(exp, step)
    if final.exists():  # a retried task after the rename
        return str(final)
    tmp = layout.partial_step_dir(exp, step)
    shutil.rmtree(tmp, ignore_errors=True)
    actor = tmp / "actor"
    policy_for(config).trainer.save_checkpoint(actor)
    copy_side_files(Path(base_model_dir), actor / "huggingface")  # config, tokenizer, templates
    store = ExperienceStore.for_experiment(exp)
    try:
        trainer_meta = {"train_step": step, "model_version": step, "buffer": store.read_position()}
    finally:
        store.close()
    write_json_atomic(tmp / layout.TRAINER_META, trainer_meta)
    tmp.rename(final)
    write_json_atomic(exp / layout.TRAINER_META, trainer_meta)
    write_text_atomic(exp / layout.LATEST_CHECKPOINT, str(step))
    write_text_atomic(exp / layout.LATEST_STATE_DICT, str(step))
    get_run_logger().info("checkpoint of step %d saved to %s", step, final)
    if deleted := prune_checkpoints(exp, config.trainer.max_checkpoints_to_keep, step):
        get_run_logger().info("deleted the checkpoint(s) of step %s (trainer.max_checkpoints_to_keep=%d)",
                              ", ".join(map(str, deleted)), config.trainer.max_checkpoints_to_keep)
    return str(final)


@task(name="restore-checkpoint", cache_policy=NO_CACHE)
def restore_checkpoint(config: ExperimentConfig) -> int:
    """Bring the trainer and the buffer back to the latest complete checkpoint; returns its step
    (0: none, a fresh start). Experiences explored after it stay and are trained once, in order."""
    exp = experiment_dir(config)
    if leftovers := remove_leftovers(exp):
        get_run_logger().info("removed %d checkpoint folder(s) a cut-short deletion left: %s", len(leftovers),
                              ", ".join(p.name for p in leftovers))
    step = layout.latest_step(exp)
    store = ExperienceStore.for_experiment(exp)
    try:
        if step is None:
            rewound = store.restore_read_position({"train_step": 0, "trained": 0})
        else:
            meta = read_json(layout.step_dir(exp, step) / layout.TRAINER_META)
            policy_for(config).trainer.load_checkpoint(layout.actor_dir(exp, step))
            rewound = store.restore_read_position(meta["buffer"])
        explored = store.max_explore_step()
        untrained = store.count_untrained()
    finally:
        store.close()
    if step is not None or explored > 0:
        get_run_logger().info(
            "resuming after step %s: %d experiences back to untrained, %d untrained in all, explored up to step %d",
            step or 0, rewound, untrained, explored,
        )
    return step or 0
