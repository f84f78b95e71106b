"""Advantage-function registry and the outcome-reward plumbing shared by the estimators.

Every advantage fn has the signature
``fn(rewards [B], group_ids list[str], response_mask [B, T], args: dict) -> advantages [B, T]``
and is registered with the model of its arguments (``Args``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from algorithms.registry import Registry

if TYPE_CHECKING:
    import torch

ADVANTAGE_FNS = Registry("algorithm.advantage_fn")
register_advantage_fn = ADVANTAGE_FNS.register


def token_level_rewards(rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Place each sequence's scalar reward on its last response token (veRL's outcome-reward layout)."""
    import torch

    mask = response_mask.float()
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    last = torch.where(mask > 0, positions, torch.zeros_like(positions)).amax(dim=1)
    out = torch.zeros_like(mask, dtype=torch.float32)
    out[torch.arange(mask.shape[0], device=mask.device), last] = rewards.float()
    return out


def group_index(group_ids: list[str]) -> Any:
    """veRL's estimators key groups by ``index[i]``; an object array of the ids does that."""
    import numpy as np

    return np.array(list(group_ids), dtype=object)
