"""The final model's place in the experiment directory."""

from __future__ import annotations

from prefect import get_run_logger

from checkpointing import layout
from checkpointing.layout import experiment_dir
from schemas import ExperimentConfig


def link_final_model(config: ExperimentConfig, step: int) -> str:
    """{experiment_dir}/final -> global_step_{step}/actor, so final/huggingface is the converted model
    (what a next stage starts from; see ExperimentConfig.resolve_stages)."""
    final = layout.final_link(experiment_dir(config))  # not final_model_dir.resolve(): that follows the link
    target = layout.actor_dir(experiment_dir(config), step)
    tmp = final.with_name(".final.tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target.relative_to(final.parent), target_is_directory=True)
    tmp.replace(final)
    get_run_logger().info("final model: %s", final / "huggingface")
    return str(final / "huggingface")
