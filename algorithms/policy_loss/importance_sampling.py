"""Importance-sampled policy gradient without clipping: -(π/π_old) · A, aggregated with
``loss_agg_mode`` (Trinity-RFT's `importance_sampling`, Tinker's built-in of the same name)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from algorithms.aggregation import aggregate
from algorithms.policy_loss.base import AdvantageScaledArgs, AggregatedArgs, register_policy_loss_fn

if TYPE_CHECKING:
    import torch

    from algorithms.inputs import LossInputs


class ImportanceSamplingArgs(AggregatedArgs, AdvantageScaledArgs):
    """Importance-sampled policy gradient (used by on-policy distillation)."""


@register_policy_loss_fn("importance_sampling", ImportanceSamplingArgs)
def importance_sampling(inputs: LossInputs, args: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    log_ratio = (inputs.logprobs - inputs.old_logprobs).clamp(-20.0, 20.0)
    loss = aggregate(-log_ratio.exp() * inputs.advantages, inputs, args["loss_agg_mode"], args.get("loss_scale_factor"))
    mask = inputs.response_mask
    ppo_kl = float((-log_ratio.detach() * mask).sum() / mask.sum().clamp(min=1.0))
    return loss, {"pg_loss": loss.item(), "ppo_kl": ppo_kl}
