"""The critic of PPO with GAE (advantage_fn 'ppo') on veRL: its value-model engine (veRL's FSDPEngineWithValueHead,
value_loss) in the same worker processes as the actor.

The order within a train step is veRL's, and the torch trainer's (backends/critic.py): the critic scores the batch
(the old values), GAE makes the per-token advantages and returns on the controller (algorithms.gae, whitened over
the batch), the critic takes `ppo_epochs` optimizer steps on the clipped value loss, and the policy then trains on
those advantages. Checkpoints keep the critic in veRL's layout beside the actor (global_step_N/critic).
"""

from __future__ import annotations

from typing import Any

import torch

import algorithms
from backends.batch import collate
from backends.critic import value_metrics
from backends.verl import batch as vb
from buffer.experience import Experience

# veRL's value-loss and engine metric names -> ours (those of the torch critic)
METRIC_NAMES = {"critic/vf_loss": "critic/value_loss", "critic/vf_clipfrac": "critic/vf_clipfrac",
                "grad_norm": "critic/grad_norm", "lr_used": "critic/lr"}


class VerlCritic:
    """The critic's part of a veRL train step, driving the workers' `compute_values` and `update_critic`."""

    def __init__(self, workers: Any, config: Any, pad_token_id: int, temperature: float) -> None:  # noqa: ANN401
        self.workers = workers
        self.settings = config.trainer.critic
        self.seed = config.trainer.seed
        self.gae_args = algorithms.ADVANTAGE_FNS.resolve_args("ppo", config.algorithm.advantage_fn_args)
        self.pad_token_id = pad_token_id
        self.temperature = temperature

    def step(self, rows: list[Experience], penalties: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        """The per-token advantages [B, R] of `rows` (the padded batch) after the critic's steps, and its metrics.
        `penalties`: the reward's KL penalty per token by experience id (algorithm.kl_penalty_fn), added to GAE's
        rewards; empty without one."""
        from verl.utils import tensordict_utils as tu

        scoring = vb.to_tensordict(rows, self.pad_token_id, self.temperature)
        tu.assign_non_tensor(scoring, compute_loss=False)
        old = vb.response_logprobs(self.workers.compute_values(scoring), scoring, key="values")
        batch = collate(rows, self.pad_token_id)
        mask = batch.response_mask
        penalty = None
        if penalties:
            penalty = torch.zeros_like(mask)
            for i, exp in enumerate(rows):
                if exp.eid in penalties:
                    values = penalties[exp.eid].float()
                    penalty[i, : values.shape[-1]] = values
        advantages, returns = algorithms.gae(batch.rewards, old, mask, self.gae_args, penalty)

        data = vb.to_tensordict(rows, self.pad_token_id, self.temperature, values=old, returns=returns)
        tu.assign_non_tensor(
            data, compute_loss=True, global_batch_size=vb.sequences_trained(rows), mini_batch_size=len(rows),
            epochs=self.settings.ppo_epochs, seed=self.seed, dataloader_kwargs={"shuffle": False},
        )
        metrics = vb.our_metrics(tu.get(self.workers.update_critic(data), "metrics"), METRIC_NAMES)
        return advantages, {**metrics, **value_metrics(returns, old, mask)}
