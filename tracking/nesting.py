"""The parent run's status follows its nested runs. A step of its own in the spool (spool.py), so that a
run that ends while MLflow is down finishes its parent when the kept writes are replayed."""

from __future__ import annotations

from mlflow.tracking import MlflowClient

PARENT_TAG = "mlflow.parentRunId"  # MLflow's own: the UI nests the run below its parent


def settle_parent(client: MlflowClient, run_id: str) -> None:
    """The parent of `run_id`: running while a nested run runs, else failed if one failed, else finished."""
    parent = client.get_run(run_id).data.tags.get(PARENT_TAG)
    if not parent:
        return
    run = client.get_run(parent)
    children = client.search_runs([run.info.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{parent}'")
    statuses = {child.info.status for child in children}
    if "RUNNING" in statuses:
        return
    status = "FAILED" if statuses & {"FAILED", "KILLED"} else "FINISHED"
    if run.info.status != status:
        client.set_terminated(parent, status=status)
