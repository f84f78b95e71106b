"""OPMD advantage as Trinity-RFT defines it: reward minus a group baseline, either the group mean or
``tau * log(mean(exp(r / tau)))`` ("logavgexp"); a group of one has baseline 0. Not in veRL."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from algorithms.advantage.base import register_advantage_fn
from algorithms.registry import Args

if TYPE_CHECKING:
    import torch

BASELINES = ("mean", "logavgexp")


class OPMDAdvantageArgs(Args):
    """OPMD group baseline advantage."""

    opmd_baseline: Literal["mean", "logavgexp"] = Field("mean", description="Group baseline.")
    tau: float = Field(1.0, gt=0, description="Temperature of the logavgexp baseline.")


@register_advantage_fn("opmd", OPMDAdvantageArgs, needs={"groups"})
def opmd(rewards: torch.Tensor, group_ids: list[str], response_mask: torch.Tensor, args: dict[str, Any]) -> torch.Tensor:
    kind, tau = args["opmd_baseline"], float(args["tau"])
    if kind not in BASELINES:
        raise ValueError(f"algorithm.advantage_fn_args.opmd_baseline: {kind!r} is not one of {list(BASELINES)}")
    scores = rewards.detach().float().clone()
    groups: dict[str, list[int]] = {}
    for i, gid in enumerate(group_ids):
        groups.setdefault(gid, []).append(i)
    for rows in groups.values():
        if len(rows) == 1:
            continue
        group = rewards[rows].detach().float()
        if kind == "mean":
            baseline = group.mean()
        else:
            baseline = tau * ((group / tau).logsumexp(dim=0) - math.log(len(rows)))
        scores[rows] = group - baseline
    return scores.unsqueeze(-1) * response_mask.float()


# Trinity-RFT's name of its veRL-batch implementation of the same estimator.
register_advantage_fn("opmd_verl", OPMDAdvantageArgs, needs={"groups"})(opmd)
