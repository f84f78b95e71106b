"""Importance-sampled policy gradient without clipping: -(π/π_old) · A, aggregated with
``loss_agg_mode`` (Trinity-RFT's `importance_sampling`, Tinker's built-in of the same name)."""

from __future__ import annotations

from typing import Any

import torch

from algorithms.aggregation import aggregate
from algorithms.inputs import LossInputs
from algorithms.policy_loss.base import register_policy_loss_fn


@register_policy_loss_fn("importance_sampling", defaults={"loss_agg_mode": "token-mean"})
def importance_sampling(inputs: LossInputs, args: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    log_ratio = torch.clamp(inputs.logprobs - inputs.old_logprobs, -20.0, 20.0)
    loss = aggregate(-torch.exp(log_ratio) * inputs.advantages, inputs, args["loss_agg_mode"], args.get("loss_scale_factor"))
    with torch.no_grad():
        mask = inputs.response_mask
        ppo_kl = float((-log_ratio * mask).sum() / mask.sum().clamp(min=1.0))
    return loss, {"pg_loss": loss.item(), "ppo_kl": ppo_kl}
