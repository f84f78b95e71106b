"""PPO with a critic (advantage_fn 'ppo', GAE) through the real stack (Prefect, Ray, vLLM CPU, the torch
trainer, MLflow): the smoke recipe as the ppo preset, 2 steps. The critic's metrics reach MLflow like the
other train metrics, each checkpoint holds the critic (global_step_N/critic, safetensors and a
weights_only optimizer state), and a fresh trainer restores it from there."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient
from safetensors.torch import load_file

from backends.critic import OPTIM_STATE, WEIGHTS
from checkpointing.layout import actor_dir
from checkpointing.models import resolve_model_path
from checkpointing.safe_load import load_tensors
from deployments import load_recipe
from tracking import tracking_uri

pytestmark = [pytest.mark.slow, pytest.mark.full]  # CI's 90 minutes: scripts/test.sh --full (docs/testing.md, 2026-11-29)

CRITIC_METRICS = ("train/critic/value_loss", "train/critic/vf_explained_var", "train/critic/values_mean")


def test_ppo_logs_the_critic_and_checkpoints_it(tmp_path: Path, tiny_model_path: str) -> None:
    from backends.torch_trainer import TorchTrainer
    from flows.rft import rft

    config = load_recipe("smoke").with_overrides({
        "name": "ppo-critic", "checkpoint_root_dir": str(tmp_path), "cluster.ray_address": "local",
        "model.model_path": tiny_model_path,  # tests/tiny_model.py: the critic's values, not the rewards, make its loss
        "algorithm": {"algorithm_type": "ppo", "repeat_times": 2},
        "model.max_response_tokens": 16, "explorer.eval_on_startup": False,
        "buffer.explorer_input.eval_tasksets": [], "trainer.save_interval": 1,  # cheaper: train only
        "trainer.critic": {"optim": {"lr": 1e-4}, "cliprange_value": 0.5},
    })
    assert not config.warnings, config.warnings
    assert config.model.critic_model_path == config.model.model_path  # derived: the critic starts from the policy
    outcome = rft(config=config)[config.name]
    assert outcome["steps"] == 2
    client = MlflowClient(tracking_uri=tracking_uri(config))
    for key in CRITIC_METRICS:
        history = client.get_metric_history(outcome["mlflow_run_id"], key)
        assert sorted(m.step for m in history) == [1, 2], key
        assert all(math.isfinite(m.value) for m in history), (key, history)
    assert all(m.value > 0 for m in client.get_metric_history(outcome["mlflow_run_id"], "train/critic/value_loss"))

    exp = config.experiment_dir
    critic = actor_dir(exp, 2).parent / "critic"
    saved = load_file(str(critic / WEIGHTS))
    assert "score.weight" in saved  # the value head, beside the base model's weights
    assert load_tensors(critic / OPTIM_STATE)["optimizer"]["state"]  # AdamW moments of a trained critic

    fresh = TorchTrainer(config, resolve_model_path(config.model.model_path), total_steps=2)
    head = fresh.critic.model.score.weight.detach().clone()
    fresh.load_checkpoint(actor_dir(exp, 2))
    assert fresh.global_step == 2
    restored = dict(fresh.critic.model.named_parameters())
    assert all(torch.equal(restored[name].detach().cpu(), tensor) for name, tensor in saved.items())
    assert not torch.equal(head, restored["score.weight"].detach().cpu())  # not the fresh head: the trained one

