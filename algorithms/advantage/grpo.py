"""GRPO: reward minus its group mean, divided by the group std unless ``norm_adv_by_std_in_grpo`` is
False (Dr. GRPO). veRL's ``compute_grpo_outcome_advantage`` does the work."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from algorithms.advantage.base import group_index, register_advantage_fn, token_level_rewards
from algorithms.registry import Args

if TYPE_CHECKING:
    import torch


class GRPOArgs(Args):
    """Group-relative advantage: (r - mean(group)) / (std(group) + ε)."""

    epsilon: float = Field(1e-6, gt=0, description="Added to the group std to avoid division by zero.")
    std_threshold: float | None = Field(
        None, ge=0, description="Groups whose reward std is at or below this are dropped; None keeps all."
    )
    norm_adv_by_std_in_grpo: bool = Field(True, description="Divide by the group std (False: Dr. GRPO).")


@register_advantage_fn("grpo", GRPOArgs, needs={"groups"})
def grpo(rewards: torch.Tensor, group_ids: list[str], response_mask: torch.Tensor, args: dict[str, Any]) -> torch.Tensor:
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    advantages, _ = compute_grpo_outcome_advantage(
        token_level_rewards=token_level_rewards(rewards, response_mask),
        response_mask=response_mask.float(),
        index=group_index(group_ids),
        epsilon=float(args["epsilon"]),
        norm_adv_by_std_in_grpo=bool(args["norm_adv_by_std_in_grpo"]),
    )
    threshold = args.get("std_threshold")
    if threshold is not None:
        # Groups whose rewards barely differ carry no signal: zero their advantages.
        for gid in set(group_ids):
            rows = [i for i, g in enumerate(group_ids) if g == gid]
            if len(rows) > 1 and rewards[rows].float().std() <= float(threshold):
                advantages[rows] = 0.0
    return advantages


# Trinity-RFT's name of its veRL-batch implementation of the same estimator.
register_advantage_fn("grpo_verl", GRPOArgs, needs={"groups"})(grpo)
