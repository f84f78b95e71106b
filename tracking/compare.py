"""An A/B comparison in MLflow: a parent run, one child run per variant (its final numbers, a link to the
variant's own run), the table (comparison.json) and the variants' training curves overlaid
(comparison_curve.png)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from tracking.spool import TrackingClient  # noqa: E402

COMPARE_TAG = "rft.compare"
VARIANT_RUN_TAG = "rft.variant_run"


def log(client: TrackingClient, experiment_id: str, name: str, rows: list[dict[str, Any]],
        curves: dict[str, list[tuple[int, float]]], curve_label: str) -> str:
    """The comparison's parent run (returned), a child per row (row["variant"], row["run_id"])."""
    parent = client.create_run(experiment_id, run_name=f"compare {name}", tags={COMPARE_TAG: name}).info.run_id
    for row in rows:
        child = client.create_run(experiment_id, run_name=row["variant"], tags={
            "mlflow.parentRunId": parent, COMPARE_TAG: name, VARIANT_RUN_TAG: str(row.get("run_id"))}).info.run_id
        for key, value in row.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                client.log_metric(child, key.replace("@", "_at_"), float(value))
        client.set_terminated(child)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    client.log_table(parent, data={c: [row.get(c) for row in rows] for c in columns}, artifact_file="comparison.json")
    with tempfile.TemporaryDirectory() as tmp:
        figure, axes = plt.subplots(figsize=(8, 4.5))
        for label, points in curves.items():
            if points:
                axes.plot([s for s, _ in points], [v for _, v in points], marker="o", label=label)
        axes.set_xlabel("step")
        axes.set_ylabel(curve_label)
        axes.set_title(f"{name}: {curve_label} per step")
        axes.legend()
        path = Path(tmp) / "comparison_curve.png"
        figure.savefig(path, dpi=100, bbox_inches="tight")
        plt.close(figure)
        client.log_artifact(parent, str(path))
    client.set_terminated(parent)
    return parent
