"""The run's curve, read back from MLflow: reward_curve.png (training reward per step above; every eval
taskset's strict / lenient accuracy and format rate at each evaluation below, step 0: before training)
and the same points as table rows (the Prefect table artifact). TensorBoard and W&B draw their own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkpointing import layout
from checkpointing.layout import experiment_dir
from schemas import ExperimentConfig
from tracking.spool import TrackingClient

TRAIN_CURVES = (("explore/reward_mean", "train reward", "tab:blue"), ("explore/strict", "train strict", "tab:green"),
                ("explore/format", "train format", "tab:orange"))
SFT_CURVES = (("train/loss", "SFT loss (response tokens)", "tab:red"),)  # a warm-up stage has no rewards
DPO_CURVES = (("train/dpo_loss", "DPO loss", "tab:red"),  # preference pairs: the implicit reward's accuracy and margin
              ("train/reward_accuracy", "reward accuracy (chosen over rejected)", "tab:green"),
              ("train/reward_margin", "reward margin", "tab:blue"))
DATASET_CURVES = {"sft": (SFT_CURVES, "SFT rows: loss"), "dpo": (DPO_CURVES, "preference pairs")}
EVAL_CURVES = (("strict", "tab:green"), ("lenient", "tab:purple"), ("format", "tab:orange"))
TASKSET_STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"))


def train_curves(config: ExperimentConfig) -> tuple[tuple[str, str, str], ...]:
    """(metric, label, colour) of the training side's curves."""
    return DATASET_CURVES.get(config.algorithm.algorithm_type, (TRAIN_CURVES, ""))[0]


def rows(client: TrackingClient, config: ExperimentConfig, run_id: str) -> list[dict[str, Any]]:
    """The curve's points as table rows, one per step: the training samples' reward / strict / format (an SFT
    stage: its loss) and, at evaluation steps, each eval taskset's strict / lenient / format."""
    metrics = client.get_run(run_id).data.metrics
    eval_keys = sorted(k for k in metrics if k.startswith("eval/") and k.rsplit("/", 1)[-1] in dict(EVAL_CURVES))
    by_step: dict[int, dict[str, Any]] = {}
    for key in [k for k, _, _ in train_curves(config)] + eval_keys:
        for point in client.get_metric_history(run_id, key):
            by_step.setdefault(point.step, {"step": point.step})[key] = round(point.value, 4)
    columns = ["step", *(k for k, _, _ in train_curves(config) if k in metrics), *eval_keys]
    return [{c: by_step[step].get(c, "") for c in columns} for step in sorted(by_step)]


def draw(client: TrackingClient, config: ExperimentConfig, run_id: str, file_name: str = "reward_curve.png") -> Path:
    """The PNG, written into {experiment_dir}/log/ (the caller logs it as an artifact)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def history(key: str) -> tuple[list[int], list[float]]:
        points = sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)
        return [m.step for m in points], [m.value for m in points]

    fig, (train_ax, eval_ax) = plt.subplots(2, 1, figsize=(7, 6.5), sharex=True)
    for key, label, color in train_curves(config):
        steps, values = history(key)
        if not steps:
            continue
        window = max(1, min(10, len(values) // 5))
        smooth = [sum(values[max(0, i - window + 1) : i + 1]) / (i + 1 - max(0, i - window + 1)) for i in range(len(values))]
        if key == "explore/reward_mean":
            train_ax.plot(steps, values, color=color, alpha=0.3, marker=".", label=f"{label} (each step)")
        train_ax.plot(steps, smooth, color=color, label=f"{label}" + (f" (mean of {window} steps)" if window > 1 else ""))
    train_ax.set_ylabel(DATASET_CURVES.get(config.algorithm.algorithm_type, ((), "training samples"))[1])
    train_ax.set_title(f"{config.project}/{config.name}")
    train_ax.grid(alpha=0.3)
    if train_ax.get_lines():
        train_ax.legend(loc="upper left", fontsize=8)

    metrics = client.get_run(run_id).data.metrics
    tasksets = sorted({k.split("/")[1] for k in metrics if k.startswith("eval/") and k.count("/") == 2})
    for i, name in enumerate(tasksets):
        style, marker = TASKSET_STYLES[i % len(TASKSET_STYLES)]
        for metric, color in EVAL_CURVES:
            steps, values = history(f"eval/{name}/{metric}")
            if steps:
                eval_ax.plot(steps, values, linestyle=style, marker=marker, color=color, label=f"{name} {metric}")
    eval_ax.set_ylim(-0.02, 1.02)
    eval_ax.set_xlabel("step (0: before training)")
    eval_ax.set_ylabel("held-out share")
    eval_ax.grid(alpha=0.3)
    if eval_ax.get_lines():
        eval_ax.legend(loc="best", fontsize=8)
    out = layout.log_dir(experiment_dir(config)) / file_name
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
