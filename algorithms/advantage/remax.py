"""ReMax (Li et al. 2023): each sample's reward minus the reward of the greedy answer to the same task.

The explorer samples that greedy answer beside the group (tasks/greedy_baseline.py) and does not train on it.
A sample counts as better or worse than what the model answers greedily: when the greedy answer is wrong, the
wrong samples get 0 and only the right ones move; when it is right, only the samples that got it wrong move.
veRL's ``compute_remax_outcome_advantage`` does the arithmetic."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from algorithms.advantage.base import register_advantage_fn, token_level_rewards
from algorithms.registry import Args

if TYPE_CHECKING:
    import torch

class ReMaxArgs(Args):
    """Reward minus the greedy answer's reward (no arguments)."""


@register_advantage_fn("remax", ReMaxArgs, needs={"greedy_baseline"})
def remax(rewards: torch.Tensor, group_ids: list[str], response_mask: torch.Tensor, args: dict[str, Any],
          baselines: torch.Tensor | None = None) -> torch.Tensor:
    from verl.trainer.ppo.core_algos import compute_remax_outcome_advantage

    if baselines is None or baselines.shape != rewards.shape:
        raise ValueError("algorithm.advantage_fn 'remax' needs the greedy answer's reward of each sample's task "
                         "(tasks/greedy_baseline.py samples it on the explorer)")
    advantages, _ = compute_remax_outcome_advantage(
        token_level_rewards=token_level_rewards(rewards, response_mask),
        reward_baselines=baselines.float().to(response_mask.device),
        response_mask=response_mask.float(),
    )
    return advantages
