"""``none``: no advantage (algorithms that learn from data only, e.g. sft): zeros."""

from __future__ import annotations

from typing import Any

import torch

from algorithms.advantage.base import register_advantage_fn


@register_advantage_fn("none")
def none(rewards: torch.Tensor, group_ids: list[str], response_mask: torch.Tensor, args: dict[str, Any]) -> torch.Tensor:
    return torch.zeros_like(response_mask, dtype=torch.float32)
