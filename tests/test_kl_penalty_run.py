"""algorithm.kl_penalty_fn through the real stack (Prefect, Ray, vLLM CPU, the torch trainer, MLflow): the
smoke recipe with `abs` in the reward. The trainer's reference is the model the stage started from: at
step 1 the rollouts come from those weights (vLLM's log-probs, within its numerics of the trainer's), at
step 2 from the weights after one step (lr 1e-4), so the KL is positive and the penalised rewards MLflow
shows are below the scored ones."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from deployments import load_recipe
from tracking import tracking_uri

pytestmark = [pytest.mark.slow, pytest.mark.full]  # CI's 90 minutes: scripts/test.sh --full (docs/testing.md, 2026-11-29)


def test_kl_penalty_is_logged_and_lowers_the_reward(tmp_path: Path) -> None:
    from flows.rft import rft

    config = load_recipe("smoke").with_overrides({
        "name": "kl-penalty", "checkpoint_root_dir": str(tmp_path), "cluster.ray_address": "local",
        "model.max_response_tokens": 16, "explorer.eval_on_startup": False,
        "buffer.explorer_input.eval_tasksets": [], "trainer.save_interval": 2,  # cheaper: train only
        "algorithm.optimizer.lr": 1e-4,
        "algorithm.kl_penalty_fn": "abs", "algorithm.kl_penalty_fn_args": {"kl_coef": 0.5},
    })
    assert not config.warnings, config.warnings
    outcome = rft(config=config)[config.name]
    assert outcome["steps"] == 2
    client = MlflowClient(tracking_uri=tracking_uri(config))

    def history(key: str) -> list[float]:
        return [m.value for m in sorted(client.get_metric_history(outcome["mlflow_run_id"], key), key=lambda m: m.step)]

    kl, before, after = history("train/kl_penalty"), history("train/reward_before_kl"), history("train/reward_after_kl")
    assert len(kl) == len(before) == len(after) == 2
    assert history("train/kl_penalty_coef") == [0.5, 0.5]  # fixed: adaptive is off
    print(f"kl penalty per step {kl}; rewards before {before} after {after}")
    assert kl[0] >= 0 and kl[1] > 0, kl
    assert after[0] <= before[0] and after[1] < before[1], (before, after)
