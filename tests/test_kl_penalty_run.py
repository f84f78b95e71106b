"""algorithm.kl_penalty_fn through the real stack (Prefect, Ray, vLLM CPU, the torch trainer, MLflow): the
smoke recipe with k3 in the reward. The trainer's reference is the model the stage started from; the
rollout log-probs come from vLLM, so the estimate is positive from the first step (k3 ≥ 0), and the
penalised rewards MLflow shows are below the scored ones."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from deployments import load_recipe
from tracking import tracking_uri

pytestmark = pytest.mark.slow


def test_kl_penalty_is_logged_and_lowers_the_reward(tmp_path: Path) -> None:
    from flows.rft import rft

    config = load_recipe("smoke").with_overrides({
        "name": "kl-penalty", "checkpoint_root_dir": str(tmp_path), "cluster.ray_address": "local",
        "model.max_response_tokens": 16, "explorer.eval_on_startup": False,
        "buffer.explorer_input.eval_tasksets": [], "trainer.save_interval": 2,  # cheaper: train only
        "algorithm.kl_penalty_fn": "k3", "algorithm.kl_penalty_fn_args": {"kl_coef": 0.5},
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
    assert all(k > 0 for k in kl), kl
    assert all(a < b for a, b in zip(after, before, strict=True)), (before, after)
