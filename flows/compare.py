"""`compare`: variants of one recipe (another backend, algorithm or setting), each a whole `rft` run with the
same seeds and data, then one comparison: an MLflow parent run with a child per variant, a table and the
training curves overlaid (tracking/compare.py), and a Prefect table and markdown artifact saying which won
on which held-out metric, by how much, and whether that is beyond the noise of the eval's size.

The variants run one after another: each run already uses the machine's cores and devices (`cluster`), so
side by side they would only slow each other down.
"""

from __future__ import annotations

import math
from typing import Any

from prefect import flow
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.context import FlowRunContext

import tracking
from flows.rft import rft
from schemas import ExperimentConfig

MEASURED = ("strict", "lenient", "format", "accuracy", "reward_mean")  # held-out metrics compared
CURVE = "explore/reward_mean"


def label(overrides: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in overrides.items()) or "recipe as is"


@flow(name="compare")
def compare(config: ExperimentConfig, variants: list[dict[str, Any]]) -> dict[str, Any]:
    """Run `config` once per variant (a dict of settings by dotted path), compare their final evaluations.

    Args:
        config: The recipe the variants change.
        variants: e.g. [{"trainer.trainer_type": "torch"}, {"trainer.trainer_type": "verl"}].
    """
    if len(variants) < 2:
        raise ValueError(f"compare needs two or more variants; got {len(variants)}")
    run = FlowRunContext.get().flow_run
    name = f"{config.name}-{run.name}"
    rows: list[dict[str, Any]] = []
    curves: dict[str, list[tuple[int, float]]] = {}
    for i, overrides in enumerate(variants):
        variant = config.with_overrides({**overrides, "name": f"{name}-v{i}"})
        last = variant.resolve_stages()[-1]
        summary = rft(config=variant)[last.name]
        row: dict[str, Any] = {"variant": label(overrides), "run_id": summary.get("mlflow_run_id"), "steps": summary["steps"]}
        for taskset, metrics in summary.get("eval", {}).items():
            row |= {f"{taskset}/{k}": round(metrics[k], 4) for k in MEASURED if k in metrics}
            row[f"{taskset}/tasks"] = int(metrics.get("tasks", 0))
        usage = summary.get("usage", {})
        row |= {"wall_s": round(usage.get("wall_s", 0.0), 1), "tokens_sampled": int(usage.get("tokens_sampled", 0))}
        rows_of_curve = tracking.curve_rows(last, row["run_id"]) if row["run_id"] else []
        # steps with only an evaluation (step 0) have no training reward: "" in the curve's rows
        points = [(r["step"], float(r[CURVE])) for r in rows_of_curve if isinstance(r.get(CURVE), (int, float))]
        if points:
            row["train_reward_last"] = points[-1][1]
        curves[row["variant"]] = points
        rows.append(row)
    parent = tracking.log_comparison(config, name, rows, curves, "training reward")
    verdict = verdict_markdown(name, rows, parent)
    create_table_artifact(rows, key="comparison", description=f"{name}: the variants' final held-out metrics and usage")
    create_markdown_artifact(verdict, key="comparison-verdict", description=f"{name}: which variant won")
    return {"rows": rows, "verdict": verdict, "mlflow_parent_run": parent}


def noise_band(a: float, b: float, n: int) -> float:
    """1.96 standard errors of the difference of two rates each measured on n held-out samples, Agresti and
    Caffo's way (one success and one failure added to each): two rates of 0 (or 1) on a small eval still
    leave a band, where the plain formula would claim none."""
    if n <= 0:
        return math.nan
    a, b = (a * n + 1) / (n + 2), (b * n + 1) / (n + 2)
    return 1.96 * math.sqrt((a * (1 - a) + b * (1 - b)) / (n + 2))


def verdict_markdown(name: str, rows: list[dict[str, Any]], parent: str | None) -> str:
    lines = [f"# {name}", "", "| metric | best | by | over | noise band (95 %) | beyond noise |", "|---|---|---|---|---|---|"]
    metrics = [k for k in dict.fromkeys(k for row in rows for k in row) if k.rsplit("/", 1)[-1] in MEASURED]
    for metric in metrics:
        scored = sorted((row for row in rows if metric in row), key=lambda row: row[metric], reverse=True)
        if len(scored) < 2:
            continue
        best, second = scored[0], scored[1]
        gain = best[metric] - second[metric]
        n = int(best.get(metric.rsplit("/", 1)[0] + "/tasks", 0))
        band = noise_band(best[metric], second[metric], n) if 0 <= second[metric] <= best[metric] <= 1 else math.nan
        winner = best["variant"] if gain > 0 else "tie"
        lines.append(f"| {metric} | {winner} | {gain:+.4f} | {second['variant']} | ±{band:.4f} | "
                     f"{'yes' if gain > band else 'no'} |")
    if parent:
        lines += ["", f"MLflow: parent run `{parent}` (a child run per variant, comparison.json, comparison_curve.png)."]
    return "\n".join(lines)
