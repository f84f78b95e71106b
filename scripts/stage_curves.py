"""Draw staged runs side by side from MLflow, as the README's learning pictures show them: per run a column, the
warm-up above (its SFT loss and the held-out strict accuracy at each evaluation) and the RL stage below (the
sampled reward, the held-out strict accuracy from the warm-up's own on, and the held-out format rate). Run from the repository root:

    .venv/bin/python scripts/stage_curves.py docs/learning-gsm8k.png gfin-s0:"seed 0" gfin-s1:"seed 1" --eval gsm8k-eval

A run is found by its experiment folder (checkpoints/rft/<name>/<stage>), in the MLflow store the runs wrote to
(sqlite:///checkpoints/mlflow.db unless --tracking-uri).
"""

from __future__ import annotations

import argparse
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

from tracking import EXPERIMENT_TAG  # noqa: E402
from tracking.curves import SFT_CURVES, TRAIN_CURVES  # noqa: E402

REWARD, LOSS = TRAIN_CURVES[0][0], SFT_CURVES[0][0]  # the RL stage's sampled reward, the warm-up's SFT loss


def stage_runs(client: MlflowClient, name: str) -> dict[str, Any]:
    """The MLflow runs of experiment `name`'s stages, by stage name."""
    found = {}
    experiments = [experiment.experiment_id for experiment in client.search_experiments()]
    for run in client.search_runs(experiments, f"tags.`{EXPERIMENT_TAG}` LIKE '%/{name}/%'", max_results=5000):
        parent, _, stage = run.data.tags[EXPERIMENT_TAG].rstrip("/").rpartition("/")
        if parent.endswith(f"/{name}") and stage:
            found[stage] = run
    if not found:
        raise SystemExit(f"no MLflow run of an experiment named {name!r} (tag {EXPERIMENT_TAG})")
    return found


def history(client: MlflowClient, run: Any, key: str) -> list[tuple[int, float]]:
    return sorted((point.step, point.value) for point in client.get_metric_history(run.info.run_id, key))


def annotate(ax: Any, points: list[tuple[int, float]]) -> None:
    for x, y in points:
        ax.annotate(f"{y:.3f}", (x, y), textcoords="offset points", xytext=(-10, 6))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("runs", nargs="+", help="NAME:LABEL, one per column")
    parser.add_argument("--eval", default="gsm8k-eval", help="the eval taskset whose strict accuracy is drawn")
    parser.add_argument("--tracking-uri", default="sqlite:///checkpoints/mlflow.db")
    args = parser.parse_args()
    client = MlflowClient(args.tracking_uri)
    strict = f"eval/{args.eval}/strict"
    fig, axes = plt.subplots(2, len(args.runs), figsize=(6 * len(args.runs), 7), squeeze=False)
    for col, spec in enumerate(args.runs):
        name, _, label = spec.partition(":")
        stages = stage_runs(client, name)
        # The RL stage samples; the warm-up trains on rows only (both log a train/loss).
        rl = next((run for run in stages.values() if history(client, run, REWARD)), None)
        warmup = next((run for run in stages.values() if run is not rl and history(client, run, LOSS)), None)
        ax = axes[0][col]
        start = None
        if warmup is not None:
            ax.plot(*zip(*history(client, warmup, LOSS)), color="tab:red", label="SFT loss")
            evals = history(client, warmup, strict)
            held = ax.twinx()
            held.plot(*zip(*evals), "o:", color="tab:green", label="held-out strict (greedy)")
            held.set_ylabel("held-out strict")
            annotate(held, evals)
            start = evals[-1][1] if evals else None
        ax.set_title(f"{label or name}: SFT warm-up")
        ax.set_xlabel("step")
        ax.set_ylabel("SFT loss")
        ax = axes[1][col]
        if rl is not None:
            ax.plot(*zip(*history(client, rl, REWARD)), color="tab:blue", label="sampled reward (T=1)")
            evals = history(client, rl, strict)
            points = ([(0, start)] if start is not None and all(x != 0 for x, _ in evals) else []) + evals
            ax.plot(*zip(*points), "o:", color="tab:green", label="held-out strict (greedy)")
            annotate(ax, points)
            formats = history(client, rl, strict.replace("/strict", "/format"))
            if formats:
                ax.plot(*zip(*formats), "s--", color="tab:orange", label="held-out format")
                annotate(ax, formats)
            ax.legend(loc="upper left")
        ax.set_title(f"{label or name}: RL stage")
        ax.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(args.out, dpi=90)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
