"""CISPO: -sg(clip(ratio)) * A * log p, the importance weight clipped and gradient-stopped: veRL's
``compute_policy_loss_cispo``. Defaults follow Trinity-RFT (no lower clip, upper 0.28)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from algorithms.policy_loss.base import AdvantageScaledArgs, AggregatedArgs, register_policy_loss_fn
from algorithms.verl_compat import verl_policy_loss

if TYPE_CHECKING:
    import torch

    from algorithms.inputs import LossInputs


class CISPOArgs(AggregatedArgs, AdvantageScaledArgs):
    """Clipped importance-sampling policy optimisation loss."""

    clip_range_low: float = Field(1.0, ge=0, description="Lower clip of the (stop-gradient) IS weight.")
    clip_range_high: float = Field(0.28, ge=0, description="Upper clip of the (stop-gradient) IS weight.")


@register_policy_loss_fn("cispo", CISPOArgs)
def cispo(inputs: LossInputs, args: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    from verl.trainer.ppo.core_algos import compute_policy_loss_cispo

    return verl_policy_loss(compute_policy_loss_cispo, inputs, args)
