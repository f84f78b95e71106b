"""REINFORCE++ (outcome): discounted return-to-go per token, whitened over the whole batch's response
tokens (veRL's ``compute_reinforce_plus_plus_outcome_advantage``; Trinity's ``reinforceplusplus``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from algorithms.advantage.base import register_advantage_fn, token_level_rewards
from algorithms.registry import Args

if TYPE_CHECKING:
    import torch


class ReinforcePlusPlusArgs(Args):
    """REINFORCE++ advantage (discounted returns, whitened over the batch)."""

    gamma: float = Field(1.0, ge=0, le=1, description="Discount factor.")


@register_advantage_fn("reinforceplusplus", ReinforcePlusPlusArgs)
def reinforce_plus_plus(
    rewards: torch.Tensor, group_ids: list[str], response_mask: torch.Tensor, args: dict[str, Any]
) -> torch.Tensor:
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.core_algos import compute_reinforce_plus_plus_outcome_advantage

    advantages, _ = compute_reinforce_plus_plus_outcome_advantage(
        token_level_rewards=token_level_rewards(rewards, response_mask),
        response_mask=response_mask.float(),
        config=AlgoConfig(gamma=float(args["gamma"])),
    )
    return advantages
