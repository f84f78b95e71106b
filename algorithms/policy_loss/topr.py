"""TOPR (tapered off-policy REINFORCE, arXiv 2503.14286): -sg(α) · A · log p, where α is the importance
ratio clipped to [0, 1] for samples at or below ``advantage_threshold`` and 1 above it (positive samples
get the full REINFORCE step, negative ones are tapered). The paper uses rewards; Trinity-RFT feeds the
advantage (its ``reinforce`` advantage is the reward itself)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from algorithms.aggregation import aggregate
from algorithms.policy_loss.base import AdvantageScaledArgs, AggregatedArgs, register_policy_loss_fn

if TYPE_CHECKING:
    import torch

    from algorithms.inputs import LossInputs


class TOPRArgs(AggregatedArgs, AdvantageScaledArgs):
    """Tapered off-policy REINFORCE loss."""

    advantage_threshold: float = Field(0.0, description="Advantages above this count as positive samples (α = 1).")


@register_policy_loss_fn("topr", TOPRArgs)
def topr(inputs: LossInputs, args: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    ratio = (inputs.logprobs - inputs.old_logprobs).detach().clamp(-20.0, 20.0).exp()
    negative = inputs.advantages <= float(args["advantage_threshold"])
    alpha = ratio.clamp(0.0, 1.0) * negative + (~negative).float()
    loss = aggregate(-alpha * inputs.advantages * inputs.logprobs, inputs, args["loss_agg_mode"],
                     args.get("loss_scale_factor"))
    mask = inputs.response_mask
    avg_alpha = float((alpha * mask).sum() / mask.sum().clamp(min=1.0))
    return loss, {"pg_loss": loss.item(), "topr_loss": loss.item(), "avg_alpha": avg_alpha}
