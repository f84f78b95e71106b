"""GSPO: sequence-level importance ratio (geometric mean of token ratios), clipped: veRL's
``compute_policy_loss_gspo``. Defaults follow Trinity-RFT (tiny clip ranges, seq-mean-token-mean)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from algorithms.policy_loss.base import AdvantageScaledArgs, LossAggMode, register_policy_loss_fn
from algorithms.verl_compat import verl_policy_loss

if TYPE_CHECKING:
    import torch

    from algorithms.inputs import LossInputs


class GSPOArgs(AdvantageScaledArgs):
    """GSPO (sequence-level importance ratio) policy loss."""

    clip_range: float | None = Field(None, gt=0, description="Symmetric clip range; overridden by low/high.")
    clip_range_low: float | None = Field(0.0003, gt=0, description="Lower clip range of the sequence ratio.")
    clip_range_high: float | None = Field(0.0004, gt=0, description="Upper clip range of the sequence ratio.")
    loss_agg_mode: LossAggMode = Field("seq-mean-token-mean", description="How token losses are aggregated.")


@register_policy_loss_fn("gspo", GSPOArgs)
def gspo(inputs: LossInputs, args: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    from verl.trainer.ppo.core_algos import compute_policy_loss_gspo

    return verl_policy_loss(compute_policy_loss_gspo, inputs, args)
