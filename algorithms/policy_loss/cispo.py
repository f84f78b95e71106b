"""CISPO: -sg(clip(ratio)) * A * log p, the importance weight clipped and gradient-stopped: veRL's
``compute_policy_loss_cispo``. Defaults follow Trinity-RFT (no lower clip, upper 0.28)."""

from __future__ import annotations

from typing import Any

import torch

from algorithms.inputs import LossInputs
from algorithms.policy_loss.base import register_policy_loss_fn, strip_prefix
from algorithms.verl_compat import actor_config


@register_policy_loss_fn("cispo", defaults={"clip_range_low": 1.0, "clip_range_high": 0.28, "loss_agg_mode": "token-mean"})
def cispo(inputs: LossInputs, args: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    from verl.trainer.ppo.core_algos import compute_policy_loss_cispo

    config = actor_config("cispo", args, inputs.batch_info())
    loss, metrics = compute_policy_loss_cispo(
        old_log_prob=inputs.old_logprobs,
        log_prob=inputs.logprobs,
        advantages=inputs.advantages,
        response_mask=inputs.response_mask,
        loss_agg_mode=config.loss_agg_mode,
        config=config,
    )
    return loss, {"pg_loss": loss.item(), **strip_prefix(metrics)}
