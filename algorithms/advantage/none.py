"""``none``: no advantage (algorithms that learn from data only, e.g. sft): zeros."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from algorithms.advantage.base import register_advantage_fn

if TYPE_CHECKING:
    import torch


@register_advantage_fn("none")
def none(rewards: torch.Tensor, group_ids: list[str], response_mask: torch.Tensor, args: dict[str, Any]) -> torch.Tensor:
    return response_mask.new_zeros(response_mask.shape).float()
