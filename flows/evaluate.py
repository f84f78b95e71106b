"""Evaluate stage: every eval taskset on the current engines, and the held-out preference pairs on the
trainer where the run trains, as metrics and a table beside the model before training
(explorer.eval_on_startup's evaluation at step 0)."""

from __future__ import annotations

from prefect import flow
from prefect.artifacts import create_table_artifact

from checkpointing import layout
from checkpointing.layout import experiment_dir
from checkpointing.records import read_json
from schemas import ExperimentConfig
from schemas.stage_kind import stage_kind
from tasks.dpo import evaluate_pairs
from tasks.evaluate import comparison_rows, evaluate_taskset


@flow(name="evaluate", log_prints=False)
def evaluate(config: ExperimentConfig, step: int, only: list[str] | None = None) -> list[dict]:
    """Score each of `buffer.explorer_input.eval_tasksets`, and `buffer.trainer_input.eval_pairs` where the
    run trains (those named in `only`, when given); returns one result per taskset (and one for the pairs)."""
    task = evaluate_taskset.with_options(retries=config.explorer.max_retry_times)
    tasksets = config.buffer.explorer_input.eval_tasksets
    results = [task(config, i, step) for i, taskset in enumerate(tasksets) if only is None or taskset.name in only]
    if scores_pairs(config) and (only is None or config.buffer.trainer_input.eval_pairs.name in only):
        results.append(evaluate_pairs(config))
    if results:
        at_start = {} if step == 0 else read_json(experiment_dir(config) / layout.EVAL_AT_START, {})
        table = []
        for r in results:
            before = at_start.get(r["name"])
            for row in comparison_rows(before, r["metrics"], f"step {step}"):
                if before is None:  # nothing to compare with (step 0 itself, or eval_on_startup off)
                    row = {"metric": row["metric"], f"step {step}": row[f"step {step}"]}
                table.append({"taskset": r["name"], **row})
        create_table_artifact(table, description=f"Evaluation at step {step}" + (" (before training)" if step == 0 else ""))
    return results


def scores_pairs(config: ExperimentConfig) -> bool:
    """Whether an evaluation scores `buffer.trainer_input.eval_pairs` too: only a run that trains has the trainer."""
    return config.buffer.trainer_input.eval_pairs is not None and stage_kind(config).trains


def evaluated_names(config: ExperimentConfig) -> list[str]:
    """The names of the results `evaluate` returns: each eval taskset's, then the held-out pairs' where scored."""
    names, pairs = [t.name for t in config.buffer.explorer_input.eval_tasksets], config.buffer.trainer_input.eval_pairs
    return names + [pairs.name] if pairs is not None and scores_pairs(config) else names
