"""RLOO: each reward minus the mean of the *other* rewards in its group (veRL's
``compute_rloo_outcome_advantage``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from algorithms.advantage.base import group_index, register_advantage_fn, token_level_rewards

if TYPE_CHECKING:
    import torch


@register_advantage_fn("rloo", needs={"groups"})
def rloo(rewards: torch.Tensor, group_ids: list[str], response_mask: torch.Tensor, args: dict[str, Any]) -> torch.Tensor:
    from verl.trainer.ppo.core_algos import compute_rloo_outcome_advantage

    advantages, _ = compute_rloo_outcome_advantage(
        token_level_rewards=token_level_rewards(rewards, response_mask),
        response_mask=response_mask.float(),
        index=group_index(group_ids),
    )
    return advantages
