"""algorithm.kl_penalty_fn on the veRL trainer against the torch trainer. A module of its own: the test
brings up and shuts down its own Ray, apart from tests/test_verl_trainer.py's module-scoped policy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends.policy import policy_for
from checkpointing.models import resolve_model_path
from deployments import load_recipe
from tests.test_verl_trainer import parity_batch

pytestmark = pytest.mark.slow


def test_kl_penalty_on_verl_matches_the_torch_trainer(tmp_path: Path) -> None:
    """algorithm.kl_penalty_fn on veRL (its own reference engine, no KL loss): the same batch and weights
    give the torch trainer's KL, penalised rewards and adaptive coefficient, and the coefficient is saved in
    veRL's state file. Its own Ray and one worker: no engines needed."""
    import ray

    from backends.torch_trainer import TorchTrainer
    from backends.trainer import TrainerDevices
    from backends.verl.trainer import STATE_FILE, VerlTrainer

    config = load_recipe("smoke").with_overrides({
        "name": "verl-kl-penalty", "checkpoint_root_dir": str(tmp_path), "cluster.ray_address": "local",
        "trainer.trainer_type": "verl", "trainer.cpu_workers": 1, "trainer.gradient_checkpointing": False,
        "algorithm.kl_loss_fn": "none", "algorithm.kl_loss_fn_args": {"kl_coef": 0.0},
        "algorithm.kl_penalty_fn": "k2",
        "algorithm.kl_penalty_fn_args": {"kl_coef": 0.05, "adaptive": True, "target_kl": 0.01, "horizon": 10},
    })
    model_dir = resolve_model_path(config.model.model_path)
    batch = parity_batch()  # rollout logprobs 0: far from the reference's, a large KL
    torch_side = TorchTrainer(config.with_overrides({"trainer.trainer_type": "torch", "trainer.num_threads": 2}),
                              Path(model_dir), total_steps=10)
    ours = torch_side.train_step(batch)
    del torch_side
    policy = policy_for(config)
    policy.connect()
    try:
        trainer = VerlTrainer(config, Path(model_dir), total_steps=10, devices=TrainerDevices(threads=2))
        try:
            assert trainer.configs.ref is not None and not trainer.configs.use_kl_loss
            theirs = trainer.train_step(batch)
            trainer.save_checkpoint(tmp_path / "ckpt")
            state = json.loads((tmp_path / "ckpt" / STATE_FILE).read_text())
        finally:
            trainer.close()
    finally:
        policy.release()
        ray.shutdown()
    print(f"kl penalty: torch {ours['kl_penalty']:.6f} veRL {theirs['kl_penalty']:.6f}; rewards after "
          f"{ours['reward_after_kl']:.6f} / {theirs['reward_after_kl']:.6f}")
    assert ours["kl_penalty"] > 1.0  # k2 of logprob 0 against the reference's: far from 0
    for key in ("kl_penalty", "reward_after_kl"):  # forward passes ~1e-4 apart (see the parity test above)
        assert theirs[key] == pytest.approx(ours[key], rel=1e-3), (key, ours, theirs)
    assert theirs["kl_penalty_coef"] == ours["kl_penalty_coef"] == 0.05
    assert state["reward_kl"]["kl_coef"] == pytest.approx(0.05 * (1 + 0.2 * 4 / 10))  # KL ≫ target: +20 % × 4/10
