"""AsymRE (asymmetric REINFORCE): reward minus a shifted group baseline, mean(group) + baseline_shift; a
group of one has baseline 0. A negative shift makes more samples count as positive. ``asymre_verl`` is
Trinity-RFT's older (deprecated) name of the same estimator."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from algorithms.advantage.base import register_advantage_fn
from algorithms.registry import Args

if TYPE_CHECKING:
    import torch


class AsymREArgs(Args):
    """AsymRE shifted-baseline advantage."""

    baseline_shift: float = Field(-0.1, description="Added to the group mean to make the baseline.")


@register_advantage_fn("asymre", AsymREArgs, needs={"groups"})
def asymre(rewards: torch.Tensor, group_ids: list[str], response_mask: torch.Tensor, args: dict[str, Any]) -> torch.Tensor:
    shift = float(args["baseline_shift"])
    scores = rewards.detach().float().clone()
    for rows in groups(group_ids).values():
        if len(rows) > 1:
            scores[rows] = scores[rows] - (scores[rows].mean() + shift)
    return scores.unsqueeze(-1) * response_mask.float()


register_advantage_fn("asymre_verl", AsymREArgs, needs={"groups"})(asymre)


def groups(group_ids: list[str]) -> dict[str, list[int]]:
    """Row indices of each group, in first-seen order."""
    out: dict[str, list[int]] = {}
    for i, gid in enumerate(group_ids):
        out.setdefault(gid, []).append(i)
    return out
