"""Convert stage: every trainer checkpoint under a folder (or the one a path is in) into a HF model."""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from prefect.artifacts import create_table_artifact

from checkpointing.layout import DEFAULT_MAX_SHARD_SIZE, find_step_dirs
from tasks.convert import convert_checkpoint

TABLE_COLUMNS = ("step", "format", "skipped", "dtype", "max_logit_diff", "tolerance", "model_dir", "adapter_dir")


class ConversionError(RuntimeError):
    """Some checkpoints could not be converted; the others were."""


@flow(name="convert", log_prints=False)
def convert(
    checkpoint_dir: str,
    base_model_dir: str | None = None,
    export_adapter: bool = False,
    max_shard_size: str = DEFAULT_MAX_SHARD_SIZE,
) -> list[dict]:
    """Merge each `global_step_N/actor` into `actor/huggingface/` (sharded safetensors above
    `max_shard_size`), verify its logits, optionally export the LoRA adapter; converted steps are skipped."""
    steps = find_step_dirs(Path(checkpoint_dir))
    if not steps:
        raise FileNotFoundError(f"no global_step_N folder in {checkpoint_dir}")

    # One failing step does not stop the others; the flow fails at the end, naming every failure.
    states = [
        convert_checkpoint(str(step), base_model_dir, export_adapter, max_shard_size, return_state=True)
        for step in steps
    ]
    outcomes = [state.result(raise_on_failure=False) for state in states]

    rows, results, failures = [], [], []
    for step, outcome in zip(steps, outcomes):
        if isinstance(outcome, BaseException):
            failures.append(f"{step.name}: {outcome}")
            rows.append({**dict.fromkeys(TABLE_COLUMNS), "step": step.name, "error": str(outcome)})
        else:
            results.append(outcome)
            rows.append({**{column: outcome[column] for column in TABLE_COLUMNS}, "error": None})
    create_table_artifact(
        table=rows,
        key="converted-checkpoints",
        description=f"Checkpoints under {checkpoint_dir} converted to Hugging Face format",
    )
    if failures:
        raise ConversionError(f"{len(failures)} of {len(steps)} checkpoints failed:\n" + "\n".join(failures))
    return results
