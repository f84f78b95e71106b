"""What a run used, step by step, and the budget it stops at (`budget` settings).

The ledger is {experiment_dir}/usage.json, one entry per finished step. A resume keeps the entries up to
its checkpoint (steps after it run again and are counted again), so totals are the experiment's, across
every attempt, and a run stopped by a budget continues counting under the next one.
"""

from __future__ import annotations

from pathlib import Path

from checkpointing import layout
from checkpointing.records import read_json, write_json_atomic
from schemas.budget import BudgetConfig

# step metric -> ledger key: tokens sampled by the rollouts, prompt tokens, wall seconds by side, CPU seconds
# by side (what the engines' and the trainer's processes used, tasks/usage.py)
FROM_METRICS = {"explore/tokens_sampled": "tokens_sampled", "explore/tokens_prompt": "tokens_prompt",
                "time/explore_s": "explore_s", "time/train_s": "train_s", "time/sync_s": "sync_s", "time/eval_s": "eval_s",
                "explore/cpu_s": "explore_cpu_s", "train/cpu_s": "train_cpu_s", "sync/cpu_s": "sync_cpu_s"}
# side -> the step metric of the GPUs it holds: its GPU seconds are those GPUs × its wall seconds (evaluation
# runs on the engines)
GPUS_OF = {"explore": "explore/gpus", "train": "train/gpus", "sync": "sync/gpus", "eval": "explore/gpus"}


class Ledger:
    """The experiment's usage per step, from its file, cut back to the steps a resume keeps."""

    def __init__(self, exp_dir: Path, done: int) -> None:
        self.path = exp_dir / layout.USAGE
        kept = read_json(self.path, {}).get("steps", {})
        self.steps: dict[str, dict[str, float]] = {k: v for k, v in kept.items() if int(k) <= done}

    def add(self, step: int, metrics: dict[str, float], wall_s: float) -> dict[str, float]:
        """Record step `step`; returns the totals so far as MLflow metrics (usage/...)."""
        entry = {key: float(metrics.get(name, 0.0)) for name, key in FROM_METRICS.items()}
        entry["wall_s"] = wall_s
        for side, gpus in GPUS_OF.items():
            entry[f"{side}_gpu_s"] = float(metrics.get(gpus, 0.0)) * entry[f"{side}_s"]
        entry["gpu_s"] = sum(entry[f"{side}_gpu_s"] for side in GPUS_OF)
        # the tokens the trainer ran (a prompt its group shares counted once; SFT: its batch), else what the
        # step explored: its prompts and sampled tokens
        entry["tokens_trained"] = float(metrics.get("train/train_tokens", entry["tokens_sampled"] + entry["tokens_prompt"]))
        self.steps[str(step)] = entry
        write_json_atomic(self.path, {"steps": self.steps})
        return self.metrics()

    def totals(self) -> dict[str, float]:
        keys = sorted({k for entry in self.steps.values() for k in entry})
        return {k: sum(entry.get(k, 0.0) for entry in self.steps.values()) for k in keys}

    def metrics(self) -> dict[str, float]:
        return {f"usage/{k}": v for k, v in self.totals().items()}

    def stop_reason(self, budget: BudgetConfig, step: int, total_steps: int) -> str | None:
        """Why the stage stops after step `step` (None: it goes on; after its last step it just ends)."""
        return over_budget(budget, self.totals()) if step < total_steps else None

    def stopped(self, step: int, reason: str) -> dict:
        """What a stage records when its budget stopped it after step `step` (Stage.stopped)."""
        return {"step": step, "reason": reason, "usage": self.totals()}


def over_budget(budget: BudgetConfig, totals: dict[str, float]) -> str | None:
    """Why the run must stop now (None: within budget)."""
    sampled = totals.get("tokens_sampled", 0.0)
    if budget.max_tokens is not None and sampled >= budget.max_tokens:
        return f"token budget reached: {int(sampled)} tokens sampled of budget.max_tokens {budget.max_tokens}"
    minutes = totals.get("wall_s", 0.0) / 60
    if budget.max_wall_minutes is not None and minutes >= budget.max_wall_minutes:
        return f"wall-time budget reached: {minutes:.1f} min of budget.max_wall_minutes {budget.max_wall_minutes}"
    hours = totals.get("gpu_s", 0.0) / 3600
    if budget.max_gpu_hours is not None and hours >= budget.max_gpu_hours:
        return f"GPU-hour budget reached: {hours:.3f} GPU hours of budget.max_gpu_hours {budget.max_gpu_hours}"
    return None
