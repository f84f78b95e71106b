"""Step-wise GRPO (Trinity-RFT's ``step_wise_grpo``, of ``multi_step_grpo``): each run's final reward,
normalised within its task's group, is the advantage of every step of the run. Here a multi-turn episode
is already one experience (its model turns trained, the environment's tokens masked:
workflows/multi_turn.py), so broadcasting to the steps is the experience's own advantage; the std is
the group's (``std_cal_level: group``) or the whole batch's (``batch``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from algorithms.advantage.asymre import groups
from algorithms.advantage.base import register_advantage_fn
from algorithms.registry import Args

if TYPE_CHECKING:
    import torch


class StepWiseGRPOArgs(Args):
    """GRPO over runs, broadcast to every step of a run."""

    epsilon: float = Field(1e-6, gt=0, description="Added to the std to avoid division by zero.")
    enable_step_norm: bool = Field(False, description="Divide by the run's number of steps (one experience per "
                                                      "episode here: refused at validation).")
    std_cal_level: Literal["group", "batch"] = Field("group", description="Std of the task's group, or of the batch.")
    std_threshold: float | None = Field(
        None, ge=0, description="Groups whose reward std is at or below this are zeroed; None keeps all.")


@register_advantage_fn("step_wise_grpo", StepWiseGRPOArgs, needs={"groups"})
def step_wise_grpo(
    rewards: torch.Tensor, group_ids: list[str], response_mask: torch.Tensor, args: dict[str, Any]
) -> torch.Tensor:
    import torch

    eps, threshold = float(args["epsilon"]), args["std_threshold"]
    scores = rewards.detach().float().clone()
    batch_std = scores.std() if len(scores) > 1 else torch.tensor(1.0)
    for rows in groups(group_ids).values():
        group = scores[rows].clone()
        mean, std = (group.mean(), group.std()) if len(rows) > 1 else (torch.tensor(0.0), torch.tensor(1.0))
        if threshold is not None and (len(rows) == 1 or std <= float(threshold)):
            scores[rows] = 0.0
            continue
        scale = batch_std if args["std_cal_level"] == "batch" else std
        scores[rows] = (group - mean) / (scale + eps)
    return scores.unsqueeze(-1) * response_mask.float()
