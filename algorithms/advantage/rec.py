"""REC advantage (Trinity-RFT's ``rec``): reward minus the group mean, optionally divided by the group's
(population) std. ``drop: balance`` first zeroes randomly chosen below-mean samples until a group has no
more of them than above-mean ones; the mean and std are then of the samples kept. A group of one keeps
its reward."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from algorithms.advantage.asymre import groups
from algorithms.advantage.base import register_advantage_fn
from algorithms.registry import Args

if TYPE_CHECKING:
    import torch


class RECAdvantageArgs(Args):
    """REC group advantage."""

    epsilon: float = Field(1e-6, gt=0, description="Added to the group std to avoid division by zero.")
    std_normalize: bool = Field(False, description="Divide by the group's reward std.")
    drop: Literal["balance"] | None = Field(
        None, description="balance: drop (zero) random below-mean samples until they are no more than the others.")


@register_advantage_fn("rec", RECAdvantageArgs, needs={"groups"})
def rec(rewards: torch.Tensor, group_ids: list[str], response_mask: torch.Tensor, args: dict[str, Any]) -> torch.Tensor:
    import torch

    scores = rewards.detach().float().clone()
    for rows in groups(group_ids).values():
        if len(rows) == 1:
            continue
        group = scores[rows].clone()
        keep = torch.ones(len(rows), dtype=torch.bool)
        below = (group < group.mean()).nonzero(as_tuple=True)[0]
        extra = len(below) - (len(rows) - len(below))
        if args["drop"] == "balance" and extra > 0:
            keep[below[torch.randperm(len(below))[:extra]]] = False
        kept = group[keep]
        mean, std = (kept.mean(), kept.std(unbiased=False)) if len(kept) > 1 else (torch.tensor(0.0), torch.tensor(1.0))
        adv = group - mean
        if args["std_normalize"]:
            adv = adv / (std + float(args["epsilon"]))
        scores[rows] = torch.where(keep, adv, torch.zeros_like(adv))
    return scores.unsqueeze(-1) * response_mask.float()
