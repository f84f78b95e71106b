"""Evaluate stage: every eval taskset on the current engines, as metrics and a table."""

from __future__ import annotations

from prefect import flow
from prefect.artifacts import create_table_artifact

from schemas import ExperimentConfig
from tasks.evaluate import evaluate_taskset


@flow(name="evaluate", log_prints=False)
def evaluate(config: ExperimentConfig, step: int) -> list[dict]:
    """Score each of `buffer.explorer_input.eval_tasksets`; returns one result per taskset."""
    task = evaluate_taskset.with_options(retries=config.explorer.max_retry_times)
    results = [task(config, i, step) for i in range(len(config.buffer.explorer_input.eval_tasksets))]
    if results:
        create_table_artifact(
            [{"taskset": r["name"], "step": step, **{k: round(v, 4) for k, v in r["metrics"].items()}} for r in results],
            description=f"Evaluation at step {step}",
        )
    return results
