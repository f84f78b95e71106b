"""Convert one checkpoint into a Hugging Face model (checkpointing/merge.py does the work)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from checkpointing.layout import DEFAULT_MAX_SHARD_SIZE
from checkpointing.merge import convert_step

# Called in-process with each task's result; `rft convert` registers its progress bar here.
LISTENERS: list[Callable[[dict], None]] = []


# No retries: a checkpoint that fails to convert or verify fails the same way again.
@task(name="convert-checkpoint", cache_policy=NO_CACHE, task_run_name="convert-{step_dir}")
def convert_checkpoint(
    step_dir: str,
    base_model_dir: str | None = None,
    export_adapter: bool = False,
    max_shard_size: str = DEFAULT_MAX_SHARD_SIZE,
) -> dict:
    """Merge `step_dir`'s actor into actor/huggingface/ and verify it; a converted step is skipped.

    Returns paths, `skipped`, the max logit difference to the unmerged model and its tolerance.
    """
    result = convert_step(Path(step_dir), Path(base_model_dir) if base_model_dir else None, export_adapter, max_shard_size)
    logger = get_run_logger()
    if result["skipped"]:
        logger.info("%s: already converted (%s)", result["step"], result["model_dir"])
    else:
        logger.info(
            "%s: %s -> %s (%s), max logit diff %s", result["step"], result["format"], result["model_dir"],
            result["dtype"], result["max_logit_diff"],
        )
    for listener in list(LISTENERS):
        listener(result)
    return result
