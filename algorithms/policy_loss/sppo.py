"""sPPO (arXiv 2108.05828), as Trinity-RFT's ``sppo``: -A · (log p - log p_old) on the tokens whose
(stop-gradient) ratio is inside [1/(1+ε), 1+ε]; tokens outside carry no gradient."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from algorithms.aggregation import aggregate
from algorithms.policy_loss.base import AdvantageScaledArgs, AggregatedArgs, register_policy_loss_fn

if TYPE_CHECKING:
    import torch

    from algorithms.inputs import LossInputs


class SPPOArgs(AggregatedArgs, AdvantageScaledArgs):
    """sPPO loss: the log-ratio, masked outside a multiplicative trust region."""

    epsilon: float = Field(0.3, gt=0, description="Trust region: the ratio must lie in [1/(1+ε), 1+ε].")


@register_policy_loss_fn("sppo", SPPOArgs)
def sppo(inputs: LossInputs, args: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    eps = float(args["epsilon"])
    log_ratio = inputs.logprobs - inputs.old_logprobs
    ratio = log_ratio.detach().clamp(-20.0, 20.0).exp()
    inside = ((ratio >= 1.0 / (1.0 + eps)) & (ratio <= 1.0 + eps)).float()
    loss = aggregate(-inputs.advantages * log_ratio * inside, inputs, args["loss_agg_mode"], args.get("loss_scale_factor"))
    mask = inputs.response_mask
    clipfrac = float(((1.0 - inside) * mask).sum() / mask.sum().clamp(min=1.0))
    return loss, {"pg_loss": loss.item(), "pg_clipfrac": clipfrac}
