"""REINFORCE: the advantage is the reward itself, no baseline (Trinity-RFT's ``reinforce``, the default
advantage of ``topr``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from algorithms.advantage.base import register_advantage_fn

if TYPE_CHECKING:
    import torch


@register_advantage_fn("reinforce")
def reinforce(rewards: torch.Tensor, group_ids: list[str], response_mask: torch.Tensor, args: dict[str, Any]) -> torch.Tensor:
    return rewards.detach().float().unsqueeze(-1) * response_mask.float()
